//! A front request against a compiled mapping: which operation takes it
//! ([`Mapping::match_front`]: its method, its path, its conditions on the message), and, once
//! it is read, whether it waits for the task's result ([`Op::waits`]) and whether a create that
//! brings no payment is kept unpaid ([`Op::keeps_unpaid`]). These read messages and evaluate
//! expressions as the codec does, so they sit above both the mapping (`mapping.rs`, what a file
//! compiles to, which the codec runs) and the codec.

use std::collections::BTreeMap;

use http::Method;
use serde_json::Value;

use super::codec::{holds, read_location, Context, Doc, Message};
use super::mapping::{value_text, Condition, Mapping, Op, Returns};

impl Op {
    /// Whether a create that brings no payment, on a route that takes x402, is kept as a task
    /// waiting to be paid for in band, rather than refused with 402.
    pub fn keeps_unpaid(&self, request: &dyn Doc, ctx: &Context<'_>) -> bool {
        self.unpaid.as_ref().is_some_and(|u| holds(u, request, ctx))
    }

    /// Whether this request is answered with the result (when the task settles) rather than at
    /// once.
    pub fn waits(&self, request: &dyn Doc, ctx: &Context<'_>) -> bool {
        match &self.wait {
            Some(w) => holds(w, request, ctx),
            None => self.returns == Returns::Result,
        }
    }
}

impl Mapping {
    /// The operation a front request is for: method and path template must match, and every
    /// condition of the operation hold; of several candidates the one with the most literal path
    /// segments wins, then the one with the most conditions.
    pub fn match_front(
        &self,
        method: &Method,
        path: &str,
        msg: &Message,
    ) -> Option<(&Op, BTreeMap<String, String>)> {
        self.ops
            .iter()
            .chain(&self.answers)
            .filter(|o| o.front && o.method == *method)
            .filter(|o| o.conditions.iter().all(|c| c.holds(msg)))
            .flat_map(|o| std::iter::once(&o.path).chain(&o.also).map(move |t| (o, t)))
            .filter_map(|(o, t)| {
                t.matches(path)
                    .map(|p| (o, (t.specificity(), o.conditions.len()), p))
            })
            .max_by_key(|(_, specificity, _)| *specificity)
            .map(|(o, _, p)| (o, p))
    }
}

impl Condition {
    /// Whether the message meets the condition: the location present or absent as asked, its
    /// value one of `equals` when given and none of `not`.
    pub fn holds(&self, msg: &Message) -> bool {
        let found = read_location(msg, &self.location).filter(|v| !v.is_null());
        if let Some(p) = self.present {
            if found.is_some() != p {
                return false;
            }
        }
        if let Some(equals) = &self.equals {
            if !found
                .as_ref()
                .is_some_and(|v| equals.iter().any(|e| loosely_equal(e, v)))
            {
                return false;
            }
        }
        !found
            .as_ref()
            .is_some_and(|v| self.not.iter().any(|e| loosely_equal(e, v)))
    }
}

/// Equal as JSON, or equal as text (a header's "1" equals the number 1).
fn loosely_equal(a: &Value, b: &Value) -> bool {
    a == b || value_text(a) == value_text(b)
}
