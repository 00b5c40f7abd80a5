//! The lenient parse: partial trees for autocomplete.
