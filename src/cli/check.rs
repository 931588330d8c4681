//! `interlingua check`: validate a config and say what is wrong, all of it, each cause once.
//! A secret whose environment variable is not set is a matter of where the file is deployed,
//! not of the file: said apart, and with `--allow-missing-env` a warning.

use std::process::ExitCode;

use mapping::problem::{Kind, Problems};

use super::ConfigArg;
use crate::setup::Setup;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Report environment variables that are not set (the secrets a file names) as warnings, and
    /// check the rest of the file as if they were set; exit 0 if nothing else is wrong. For
    /// checking a file where it is written rather than where it is deployed.
    #[arg(long)]
    allow_missing_env: bool,
}

/// What an unset variable stands for while the rest of the file is checked: long enough for any
/// key-length rule.
const STAND_IN: &str = "interlingua-check-stand-in-value-for-an-unset-environment-variable";

pub fn run(arg: &CheckArgs) -> ExitCode {
    let problems = match arg.config.load() {
        Ok(setup) => return ok(&setup, 0),
        Err(problems) => problems,
    };
    let unset: Vec<String> = problems.unset_env().into_iter().map(String::from).collect();
    if !arg.allow_missing_env || unset.is_empty() {
        report(&problems);
        if !unset.is_empty() {
            println!(
                "{} of them: environment variable(s) not set here ({}); \
                 `check --allow-missing-env` checks the rest of the file without them",
                unset.len(),
                unset.join(", ")
            );
        }
        return ExitCode::FAILURE;
    }
    for p in problems
        .iter()
        .filter(|p| matches!(p.kind, Kind::UnsetEnv(_)))
    {
        println!("warning: {p}");
    }
    // `check` runs no other thread: setting the process's environment is sound here.
    for var in &unset {
        std::env::set_var(var, STAND_IN);
    }
    match arg.config.load() {
        Ok(setup) => ok(&setup, unset.len()),
        Err(problems) => {
            report(&problems);
            ExitCode::FAILURE
        }
    }
}

fn ok(setup: &Setup, unset: usize) -> ExitCode {
    let config = &setup.config;
    let dialects: Vec<&str> = setup.dialects.keys().map(String::as_str).collect();
    println!(
        "{}: ok ({} listener(s), {} upstream(s), {} route(s), dialects: {}){}",
        config.origin,
        config.listeners.len(),
        config.upstreams.len(),
        config.routes.len(),
        if dialects.is_empty() {
            "passthrough only".to_string()
        } else {
            dialects.join(", ")
        },
        if unset == 0 {
            String::new()
        } else {
            format!("; set the {unset} environment variable(s) warned of before serving")
        }
    );
    // What each selling route asks of its buyers: the windows the node will be sent.
    for (i, r) in config.routes.iter().enumerate() {
        if let Some(seller) = &r.sell {
            println!("routes[{i}] (`{}`): {}", r.name, seller.summary());
        }
    }
    ExitCode::SUCCESS
}

fn report(problems: &Problems) {
    for p in problems.iter() {
        println!("{p}");
    }
    println!("{} problem(s) found", problems.len());
}
