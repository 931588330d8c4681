//! Real servers for the tests and the benchmark: a PostgreSQL cluster made by `initdb` in a
//! temporary directory and a Redis server, each on a free port of loopback, stopped (and their
//! files removed) when dropped. Nothing here is a mock: the binaries are Debian's, installed by
//! `.ci/run` (packages `postgresql` and `redis-server`).

#![forbid(unsafe_code)]

pub mod postgres;
pub mod redis;
pub mod spawner;
