//! The values settings are written in, read the same way by every section: a duration
//! (`"5s"`), a secret named by its environment variable, a setting that needs another. A leaf of
//! the config module: every section's reader uses it, and it uses none of them.

use std::time::Duration;

use mapping::problem::Collector;
use mapping::units::parse_duration;
use toml::Spanned;

/// The value of the environment variable named at `env` (a secret never sits in the file).
pub(super) fn from_env(env: &Spanned<String>, path: &str, p: &mut Collector<'_>) -> Option<String> {
    match std::env::var(env.get_ref()) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            p.unset_env(Some(env.span()), path, env.get_ref());
            None
        }
    }
}

/// A duration where zero is meaningful (`"0s"`: off).
pub(super) fn duration_or_zero(
    value: Option<&Spanned<String>>,
    path: &str,
    default: Duration,
    p: &mut Collector<'_>,
) -> Option<Duration> {
    match value.map(|v| parse_duration(v.get_ref())) {
        Some(Ok(d)) if d.is_zero() => Some(d),
        _ => duration(value, path, default, p),
    }
}

pub(super) fn duration(
    value: Option<&Spanned<String>>,
    path: &str,
    default: Duration,
    p: &mut Collector<'_>,
) -> Option<Duration> {
    let Some(v) = value else {
        return Some(default);
    };
    match parse_duration(v.get_ref()) {
        Ok(d) if d.is_zero() => {
            p.at(Some(v.span()), path, "must be longer than zero");
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            p.at(Some(v.span()), path, e);
            None
        }
    }
}

/// Reports each of `set`'s keys of `section` that is set, `(set, key)`, as having no effect
/// without the section's `needed` key.
pub(super) fn no_effect_without(
    set: &[(bool, &str)],
    section: &str,
    needed: &str,
    p: &mut Collector<'_>,
) {
    for (_, key) in set.iter().filter(|(set, _)| *set) {
        p.at(
            None,
            format!("{section}.{key}"),
            format!("has no effect without {section}.{needed}"),
        );
    }
}
