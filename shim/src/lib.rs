//! placeholder
pub mod sys;
