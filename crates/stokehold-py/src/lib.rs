//! Python binding (being written).
