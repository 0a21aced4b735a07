//! [`TransformSpec`]: one stage as data, what the planners of [`super::spec`], image stages and
//! text stages all read (a leaf, so that the planner and the stages it plans do not import each
//! other).

use serde::{Deserialize, Serialize};

/// One stage, by name, with its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformSpec {
    /// The stage's name.
    pub name: String,
    /// Its parameters (an object; `null` for none).
    #[serde(default)]
    pub params: serde_json::Value,
}
