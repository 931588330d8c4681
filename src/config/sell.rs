//! A route's `payment.accept.masumi`: the operator's Masumi payment node, on which the route's
//! jobs are sold to Masumi purchasers, and the windows of each payment request, checked here
//! against the rules the node applies when the request is made (`src/routes/api/payments/` in
//! <https://github.com/masumi-network/masumi-payment-service/tree/aca38338>), so that a route
//! whose requests the node would refuse is refused at load, not at a buyer's `start_job`.

use std::time::Duration;

use super::file::{self, MasumiSellEntry};
use super::model::{MasumiSeller, MasumiService};
use super::values::duration;
use mapping::problem::Collector;

/// masumi 1.2.0's own windows (`masumi/payment.py`): a buyer has 12 hours to pay, the result is
/// due 24 hours after the job was asked for.
const DEFAULT_PAY_BY: Duration = Duration::from_secs(12 * 3600);
const DEFAULT_SUBMIT_RESULT_BY: Duration = Duration::from_secs(24 * 3600);
/// The node sends a result's transaction only while `submitResultTime` is more than this away.
pub const SUBMIT_MARGIN: Duration = Duration::from_secs(5 * 60);
/// The node's smallest gaps: `submitResultTime` from now, `unlockTime` after it,
/// `externalDisputeUnlockTime` after that.
const NODE_GAP: Duration = Duration::from_secs(15 * 60);
/// The node's defaults for the two later times, after `submitResultTime`.
const NODE_UNLOCK: Duration = Duration::from_secs(6 * 3600);
const DEFAULT_VERDICT_EVERY: Duration = Duration::from_secs(10 * 60);

/// A route's `payment.accept.masumi`. `Some(None)`: none; `None`: problems were recorded.
pub fn seller(
    r: &file::RouteEntry,
    path: &str,
    p: &mut Collector<'_>,
) -> Option<Option<MasumiSeller>> {
    let Some(entry) = r
        .payment
        .as_ref()
        .and_then(|pay| pay.get_ref().accept.as_ref())
        .and_then(|a| a.get_ref().masumi.as_ref())
    else {
        return Some(None);
    };
    parse(entry.get_ref(), &format!("{path}.payment.accept.masumi"), p).map(Some)
}

fn parse(m: &MasumiSellEntry, path: &str, p: &mut Collector<'_>) -> Option<MasumiSeller> {
    let before = p.len();
    let node = super::payment::masumi_node(
        (
            &m.url,
            &m.token_env,
            m.network.as_ref(),
            m.lock_grace.as_ref(),
        ),
        path,
        p,
    );
    let agent = m.agent_identifier.get_ref().clone();
    if !(57..=250).contains(&agent.len()) || !agent.bytes().all(|b| b.is_ascii_hexdigit()) {
        p.at(
            Some(m.agent_identifier.span()),
            format!("{path}.agent_identifier"),
            "must be the agent's registry identifier: its NFT's policy id (56 hex digits) and asset name, 57 to 250 hex digits",
        );
    }
    let at = |field: &str| format!("{path}.{field}");
    let max_run = duration(Some(&m.max_run), &at("max_run"), Duration::ZERO, p);
    let pay_by = duration(m.pay_by.as_ref(), &at("pay_by"), DEFAULT_PAY_BY, p);
    let submit_by = duration(
        m.submit_result_by.as_ref(),
        &at("submit_result_by"),
        DEFAULT_SUBMIT_RESULT_BY,
        p,
    );
    let unlock = m
        .unlock_after
        .as_ref()
        .map(|v| duration(Some(v), &at("unlock_after"), Duration::ZERO, p));
    let dispute = m
        .dispute_unlock_after
        .as_ref()
        .map(|v| duration(Some(v), &at("dispute_unlock_after"), Duration::ZERO, p));
    let verdict_every = duration(
        m.verdict_every.as_ref(),
        &at("verdict_every"),
        DEFAULT_VERDICT_EVERY,
        p,
    );
    let mut amounts = Vec::new();
    for (i, a) in m.amounts.iter().flatten().enumerate() {
        let amount = a.get_ref().amount.get_ref();
        if amount.is_empty()
            || amount.len() > 25
            || !amount.bytes().all(|b| b.is_ascii_digit())
            || amount.bytes().all(|b| b == b'0')
        {
            p.at(
                Some(a.get_ref().amount.span()),
                format!("{path}.amounts[{i}].amount"),
                format!("`{amount}` is not a positive whole amount in the unit's smallest denomination (at most 25 digits)"),
            );
        }
        amounts.push((amount.clone(), a.get_ref().unit.clone()));
    }
    if amounts.len() > 7 {
        p.at(
            None,
            at("amounts"),
            "a payment request names at most 7 amounts",
        );
    }
    if let (Some(max_run), Some(pay_by), Some(submit_by)) = (max_run, pay_by, submit_by) {
        let windows = Windows {
            max_run,
            pay_by,
            submit_by,
            unlock: unlock.flatten(),
            dispute: dispute.flatten(),
        };
        for (field, problem) in windows.problems() {
            let span = match field {
                "pay_by" => m.pay_by.as_ref(),
                "unlock_after" => m.unlock_after.as_ref(),
                "dispute_unlock_after" => m.dispute_unlock_after.as_ref(),
                _ => m.submit_result_by.as_ref(),
            }
            .map(|s| s.span());
            p.at(span, at(field), problem);
        }
    }
    if p.len() != before {
        return None;
    }
    Some(MasumiSeller {
        node: node?,
        agent_identifier: agent,
        max_run: max_run?,
        pay_by: pay_by?,
        submit_result_by: submit_by?,
        unlock_after: unlock.flatten(),
        dispute_unlock_after: dispute.flatten(),
        verdict_every: verdict_every?,
        seller_vkey: m.seller_vkey.as_ref().map(|v| v.get_ref().clone()),
        amounts,
    })
}

/// A payment request's windows, from `start_job`.
struct Windows {
    max_run: Duration,
    pay_by: Duration,
    submit_by: Duration,
    unlock: Option<Duration>,
    dispute: Option<Duration>,
}

impl Windows {
    /// What the node would refuse, or what leaves the agent too little time: a lock may land as
    /// late as `payByTime`, and the result's transaction leaves only while `submitResultTime` is
    /// more than [`SUBMIT_MARGIN`] away.
    fn problems(&self) -> Vec<(&'static str, String)> {
        let f = |d: Duration| humantime::format_duration(d).to_string();
        let mut out = Vec::new();
        let needed = self.pay_by + self.max_run + SUBMIT_MARGIN;
        if self.submit_by < needed {
            out.push((
                "submit_result_by",
                format!(
                    "{} leaves {} after pay_by; a buyer may lock as late as pay_by, and max_run ({}) and the node's {} before submitResultTime need {}",
                    f(self.submit_by),
                    f(self.submit_by.saturating_sub(self.pay_by)),
                    f(self.max_run),
                    f(SUBMIT_MARGIN),
                    f(self.max_run + SUBMIT_MARGIN),
                ),
            ));
        } else if self.submit_by < NODE_GAP {
            out.push((
                "submit_result_by",
                format!(
                    "the node wants submitResultTime at least {} away",
                    f(NODE_GAP)
                ),
            ));
        }
        let unlock = self.unlock.unwrap_or(self.submit_by + NODE_UNLOCK);
        if self.unlock.is_some() && unlock < self.submit_by + NODE_GAP {
            out.push((
                "unlock_after",
                format!(
                    "{} is less than {} after submit_result_by ({}): the node refuses it",
                    f(unlock),
                    f(NODE_GAP),
                    f(self.submit_by)
                ),
            ));
        }
        if let Some(dispute) = self.dispute {
            if dispute < unlock + NODE_GAP {
                out.push((
                    "dispute_unlock_after",
                    format!(
                        "{} is less than {} after unlockTime ({}): the node refuses it",
                        f(dispute),
                        f(NODE_GAP),
                        f(unlock)
                    ),
                ));
            }
        }
        out
    }
}

impl MasumiSeller {
    /// The node, as the purchaser side's calls take it.
    pub fn service(&self) -> &MasumiService {
        &self.node
    }

    /// A one-line summary for `interlingua check`.
    pub fn summary(&self) -> String {
        let f = |d: Duration| humantime::format_duration(d).to_string();
        let short = |s: &str| {
            if s.len() > 12 {
                format!("{}…{}", &s[..6], &s[s.len() - 4..])
            } else {
                s.to_string()
            }
        };
        format!(
            "sells as {} on {}, payByTime +{}, submitResultTime +{}, max_run {}",
            short(&self.agent_identifier),
            self.node.network.name(),
            f(self.pay_by),
            f(self.submit_result_by),
            f(self.max_run)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(pay_by: u64, submit_by: u64, max_run: u64) -> Windows {
        Windows {
            max_run: Duration::from_secs(max_run),
            pay_by: Duration::from_secs(pay_by),
            submit_by: Duration::from_secs(submit_by),
            unlock: None,
            dispute: None,
        }
    }

    #[test]
    fn the_result_window_leaves_the_agent_its_run_after_the_latest_lock() {
        // masumi 1.2.0's own windows and a two-hour agent.
        assert!(windows(12 * 3600, 24 * 3600, 2 * 3600)
            .problems()
            .is_empty());
        let late = windows(12 * 3600, 13 * 3600, 2 * 3600).problems();
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].0, "submit_result_by");
        assert_eq!(
            late[0].1,
            "13h leaves 1h after pay_by; a buyer may lock as late as pay_by, and max_run (2h) and the node's 5m before submitResultTime need 2h 5m"
        );
    }

    #[test]
    fn the_nodes_own_gaps_are_checked_at_load() {
        assert_eq!(windows(60, 600, 60).problems()[0].0, "submit_result_by");
        let mut w = windows(3600, 7200, 60);
        w.unlock = Some(Duration::from_secs(7200 + 60));
        assert_eq!(w.problems()[0].0, "unlock_after");
        w.unlock = None;
        w.dispute = Some(Duration::from_secs(7200 + 6 * 3600));
        assert_eq!(w.problems()[0].0, "dispute_unlock_after");
    }
}
