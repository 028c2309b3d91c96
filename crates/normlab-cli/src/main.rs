//! The `normlab` binary.
fn main() {}
