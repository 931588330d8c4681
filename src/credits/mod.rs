//! Credits: accounts per (plan, subject), the ledger's rows, and what a task's steps cost.
//!
//! The money rules, in one place:
//! - creating a task holds the route's `price.hold` (402 when the available balance cannot);
//! - each step that completes is captured once, ever, at the step price the task was created
//!   under (kept on the task: [`mapping::task::StepPrice`]): the route's `price.step`, or the cost the
//!   agent reports, clamped to [`min`, `max`]; a failed step costs `price.failed` (default 0); a
//!   back without steps of its own (MIP-003), or a task priced as a whole (`per_task`: an x402
//!   `exact` payment), is charged once, for its final step;
//! - a capture comes out of the task's hold first, then out of the available balance, and never
//!   takes the balance below zero (what could not be covered is noted on the row);
//! - when the task ends, what is left of its hold is released.
//!
//! available = granted − captured − held, and every number is recomputable from the rows
//! ([`verify`] checks that, and that no hold outlives its task).

use store::Capture;

pub mod verify;

use mapping::task::{Status, Step, StepPrice, StepSource};

/// The cost of a step that just finished, under the task's price.
pub fn step_cost(price: &StepPrice, step: &Step) -> u64 {
    if step.status == Status::Failed {
        return price.failed;
    }
    if price.from_agent {
        step.cost.clamp(price.min, price.max)
    } else {
        price.step
    }
}

/// The captures for the steps that finished in an observation. A back without steps of its own
/// is one unit of work: only its final step costs anything.
pub fn captures(
    price: &StepPrice,
    source: StepSource,
    steps: &[Step],
    finished: &[String],
) -> Vec<Capture> {
    steps
        .iter()
        .filter(|s| finished.contains(&s.id))
        .filter(|s| (source == StepSource::Native && !price.per_task) || s.is_last)
        .map(|s| Capture {
            step_id: s.id.clone(),
            amount: step_cost(price, s),
        })
        .filter(|c| c.amount > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Price, PriceFrom};
    use chrono::Utc;

    fn price(from: PriceFrom) -> StepPrice {
        Price {
            hold: 10,
            step: 3,
            min: 1,
            max: 5,
            from,
            failed: 0,
            operations: Default::default(),
        }
        .step_price()
    }

    fn step(status: Status, cost: u64, is_last: bool) -> Step {
        let now = Utc::now();
        Step {
            id: uuid::Uuid::new_v4().to_string(),
            task_id: "t".into(),
            upstream_id: None,
            order: 1,
            name: None,
            status,
            predecessor: None,
            is_last,
            input: Default::default(),
            output: Default::default(),
            cost,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn costs_come_from_the_route_or_the_agent_within_bounds() {
        let ok = step(Status::Completed, 9, true);
        assert_eq!(step_cost(&price(PriceFrom::Route), &ok), 3);
        assert_eq!(
            step_cost(&price(PriceFrom::Agent), &ok),
            5,
            "clamped to max"
        );
        assert_eq!(
            step_cost(&price(PriceFrom::Agent), &step(Status::Completed, 0, true)),
            1,
            "clamped to min"
        );
        assert_eq!(
            step_cost(&price(PriceFrom::Route), &step(Status::Failed, 9, true)),
            0
        );
    }

    #[test]
    fn synthesized_steps_cost_once_for_the_final_step() {
        let steps = vec![
            step(Status::Completed, 0, false),
            step(Status::Completed, 0, true),
        ];
        let finished: Vec<String> = steps.iter().map(|s| s.id.clone()).collect();
        let p = price(PriceFrom::Route);
        assert_eq!(
            captures(&p, StepSource::Synthesized, &steps, &finished).len(),
            1
        );
        assert_eq!(captures(&p, StepSource::Native, &steps, &finished).len(), 2);
    }
}
