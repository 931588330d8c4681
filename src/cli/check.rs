//! `interlingua check`: validate a config and say what is wrong, all of it.

use std::process::ExitCode;

use super::ConfigArg;

pub fn run(arg: &ConfigArg) -> ExitCode {
    match arg.load() {
        Ok(setup) => {
            let config = &setup.config;
            let dialects: Vec<&str> = setup.dialects.keys().map(String::as_str).collect();
            println!(
                "{}: ok ({} listener(s), {} upstream(s), {} route(s), dialects: {})",
                config.origin,
                config.listeners.len(),
                config.upstreams.len(),
                config.routes.len(),
                if dialects.is_empty() {
                    "passthrough only".to_string()
                } else {
                    dialects.join(", ")
                }
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
