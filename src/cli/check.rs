//! `interlingua check`: validate a config and say what is wrong, all of it.

use std::process::ExitCode;

use super::ConfigArg;

pub fn run(arg: &ConfigArg) -> ExitCode {
    match arg.load() {
        Ok(config) => {
            println!(
                "{}: ok ({} listener(s), {} upstream(s), {} route(s))",
                config.origin,
                config.listeners.len(),
                config.upstreams.len(),
                config.routes.len()
            );
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for p in problems.iter() {
                println!("{p}");
            }
            println!("{} problem(s) found", problems.len());
            ExitCode::FAILURE
        }
    }
}
