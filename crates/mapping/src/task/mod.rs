//! The canonical task: the one model every dialect is translated through ([`model`]), how what an
//! agent reports folds into it ([`observe`]), and its timestamps ([`time`]).

pub mod model;
pub mod observe;
pub mod time;

pub use model::*;
pub use observe::{Observation, StepSource};
