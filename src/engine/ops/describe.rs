//! availability, input_schema and describe: what the route's agent is and whether it can be
//! reached, from the back where it says, else from the route and the mappings.

use serde_json::Value;

use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use mapping::dialect::doc::{Agent, Availability};
use mapping::dialect::Canonical;
use mapping::task::Operation;

/// What `describe` says of the route's agent without asking anyone: all but its input schema
/// (what `[answer.NAME]` forms and request checks read as `agent.*`).
pub(in crate::engine) fn agent<'t>(
    t: &'t Translated,
    prefix: &'t str,
    base_url: Option<String>,
) -> Agent<'t> {
    let mut operations: Vec<&str> = Vec::new();
    for o in t.front.ops.iter().filter(|o| o.front) {
        if !operations.contains(&o.op.name()) {
            operations.push(o.op.name());
        }
    }
    let prefix = prefix.trim_end_matches('/');
    Agent {
        name: &t.route,
        title: &t.back.title,
        description: t.settings.description.clone().unwrap_or_else(|| {
            format!(
                "{} (route `{}`), through interlingua",
                t.back.title, t.route
            )
        }),
        dialect: &t.front.name,
        url: if prefix.is_empty() { "/" } else { prefix },
        base_url,
        operations,
        input_schema: None,
        auth: t.owned,
        streaming: t.front.ops.iter().any(|o| o.front && o.stream.is_some()),
        x402: t.x402.is_some(),
    }
}

impl Engine {
    /// availability: the back's own answer, or whether its upstream can be reached.
    pub(in crate::engine) async fn availability(
        &self,
        t: &Translated,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let unavailable = |message| Availability {
            available: false,
            message,
        };
        if t.back.op(Operation::Availability).is_some() {
            return Ok(
                match self
                    .back
                    .call(t, Operation::Availability, &Canonical::empty(), cx)
                    .await
                {
                    Ok(answer) => Canonical::decoded(answer),
                    Err(e) => Canonical::empty().with_availability(&unavailable(e.to_string())),
                },
            );
        }
        let availability = match t.upstream.probe().await {
            Ok(()) => Availability {
                available: true,
                message: "the agent's server is reachable".to_string(),
            },
            Err(why) => unavailable(why.detail().to_string()),
        };
        Ok(Canonical::empty().with_availability(&availability))
    }

    /// describe: what the route's agent is, from the route, the mappings and the input schema.
    /// `base_url` (from the request's scheme and Host) is the absolute address discovery
    /// documents point clients at.
    pub(in crate::engine) async fn describe(
        &self,
        t: &Translated,
        prefix: &str,
        base_url: Option<String>,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let schema = match self.back.input_schema(t, cx).await {
            Ok(s) => Some(s),
            Err(ProxyError::Unsupported { .. }) => None,
            Err(e) => return Err(e),
        };
        let mut agent = agent(t, prefix, base_url);
        agent.input_schema = schema;
        // What the agent says of itself in its discovery document (an A2A card's name and
        // description), over the back dialect's title; the route's own description comes first.
        let found = self.back.discovered(t, cx, false).await;
        let said = |key: &str| {
            found
                .as_deref()
                .and_then(|d| d.get(key))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        if let Some(name) = said("name") {
            agent.title = name;
        }
        if let (None, Some(description)) = (&t.settings.description, said("description")) {
            agent.description = description.to_string();
        }
        Ok(Canonical::empty().with_agent(&agent))
    }
}
