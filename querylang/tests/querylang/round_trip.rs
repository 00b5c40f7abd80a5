//! Printing gives canonical text that parses back to the same tree.
