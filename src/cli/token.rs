//! `interlingua token mint`: a development JWT from a configured key (an HMAC secret, or a public
//! key whose `private_key_file` is configured), for trying routes with auth.

use std::process::ExitCode;
use std::time::Duration;

use jsonwebtoken::{EncodingKey, Header};
use serde_json::{json, Map, Value};

use super::{report_problems, ConfigArg};
use crate::config::{parse_duration, KeyFamily, KeyKind};

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Print a signed token for a subject and plan.
    Mint(MintArgs),
}

#[derive(Debug, clap::Args)]
pub struct MintArgs {
    /// The key to sign with (its `id` in [[auth.keys]]); default: the first key that can sign.
    #[arg(long)]
    key: Option<String>,
    /// The subject.
    #[arg(long)]
    sub: String,
    /// The plan.
    #[arg(long)]
    plan: Option<String>,
    /// How long the token is valid.
    #[arg(long, default_value = "1h")]
    ttl: String,
    #[command(flatten)]
    config: ConfigArg,
}

pub fn run(cmd: &TokenCommand) -> ExitCode {
    let TokenCommand::Mint(args) = cmd;
    let setup = match args.config.load() {
        Ok(s) => s,
        Err(problems) => return report_problems(&problems),
    };
    match mint(&setup.config, args) {
        Ok(token) => {
            println!("{token}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("interlingua token mint: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A signed token for `sub` (and `plan`), valid for `ttl`, from the config's key `key_id`.
pub fn mint_token(
    config: &crate::config::Config,
    key_id: Option<&str>,
    sub: &str,
    plan: Option<&str>,
    ttl: Duration,
) -> Result<String, String> {
    let auth = config
        .auth
        .as_ref()
        .ok_or("the config has no [auth] section")?;
    let signing = |k: &crate::config::Key| -> Option<Result<EncodingKey, String>> {
        match &k.kind {
            KeyKind::Hmac { secret } => Some(Ok(EncodingKey::from_secret(secret))),
            KeyKind::Pem {
                family,
                private_key_file: Some(file),
                ..
            } => Some(
                std::fs::read(file)
                    .map_err(|e| format!("{}: {e}", file.display()))
                    .and_then(|pem| {
                        match family {
                            KeyFamily::Rsa => EncodingKey::from_rsa_pem(&pem),
                            KeyFamily::Ec => EncodingKey::from_ec_pem(&pem),
                            KeyFamily::Ed25519 => EncodingKey::from_ed_pem(&pem),
                        }
                        .map_err(|e| format!("{}: {e}", file.display()))
                    }),
            ),
            _ => None,
        }
    };
    let key = auth
        .keys
        .iter()
        .filter(|k| key_id.is_none_or(|id| k.id == id))
        .find(|k| signing(k).is_some())
        .ok_or_else(|| match key_id {
            Some(id) => {
                format!("no key `{id}` that can sign (an hmac key, or one with private_key_file)")
            }
            None => "no key that can sign (an hmac key, or one with private_key_file)".to_string(),
        })?;
    let encoding = signing(key).ok_or("the key cannot sign")??;
    let alg = *key
        .algorithms
        .first()
        .ok_or("the key allows no algorithm")?;
    let mut header = Header::new(alg);
    header.kid = Some(key.id.clone());
    let now = chrono::Utc::now().timestamp();
    let mut claims = Map::new();
    claims.insert("iat".into(), json!(now));
    claims.insert("exp".into(), json!(now + ttl.as_secs() as i64));
    if let Some(iss) = &auth.issuer {
        claims.insert("iss".into(), json!(iss));
    }
    if let Some(aud) = &auth.audience {
        claims.insert("aud".into(), json!(aud));
    }
    let mut claims = Value::Object(claims);
    set_claim(&mut claims, &auth.subject_claim.0, json!(sub));
    if let Some(p) = plan {
        set_claim(&mut claims, &auth.plan_claim.0, json!(p));
    }
    jsonwebtoken::encode(&header, &claims, &encoding).map_err(|e| e.to_string())
}

fn mint(config: &crate::config::Config, args: &MintArgs) -> Result<String, String> {
    let ttl = parse_duration(&args.ttl).map_err(|e| e.to_string())?;
    mint_token(
        config,
        args.key.as_deref(),
        &args.sub,
        args.plan.as_deref(),
        ttl,
    )
}

fn set_claim(claims: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = claims;
    for p in parents {
        if !at.get(p).is_some_and(Value::is_object) {
            at[p.as_str()] = json!({});
        }
        at = &mut at[p.as_str()];
    }
    at[last.as_str()] = value;
}
