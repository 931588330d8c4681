//! Redis for tests: see the crate's opening comment.
