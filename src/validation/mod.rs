//! Input validation dialects require: MIP-003 Attachment 01 input schemas.

pub mod attachment01;
pub mod json_schema;
