//! Helpers shared by the integration tests (each test file uses a part).
#![allow(dead_code)]

pub mod fixtures;
pub mod fuzz;
pub mod gguf_writer;
pub mod refusal;
pub mod run_folder;
pub mod skip;
pub mod tiny_gguf;
