var indexSectionsWithContent =
{
  0: "cdfhinortwxy",
  1: "t",
  2: "t",
  3: "cdhnortwxy",
  4: "t",
  5: "t",
  6: "t",
  7: "t"
};

var indexSectionNames =
{
  0: "all",
  1: "classes",
  2: "functions",
  3: "variables",
  4: "typedefs",
  5: "enums",
  6: "enumvalues",
  7: "groups"
};

var indexSectionLabels =
{
  0: "All",
  1: "Data Structures",
  2: "Functions",
  3: "Variables",
  4: "Typedefs",
  5: "Enumerations",
  6: "Enumerator",
  7: "Modules"
};

