//! placeholder
pub mod log;
pub mod sys;
