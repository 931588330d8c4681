//! Sample agents: small real servers for `interlingua demo` (and for trying routes by hand).

pub mod echo;
