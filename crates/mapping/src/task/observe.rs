//! Folding what the back reports into the stored task, and the steps the engine supplies when the
//! back has none (MIP-003 jobs have phases, not steps).

use chrono::{DateTime, Utc};

use super::model::{Input, Output, OutputPatch, Status, Step, StepPatch, Task, TaskPatch};

/// Where a task's steps come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepSource {
    /// The back reports steps; they are merged by the back's step id (or position).
    Native,
    /// The back reports only a status; one step per status it passes through.
    Synthesized,
}

/// What an observation changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// Whether anything about the task changed (and it must be stored).
    pub changed: bool,
    /// Steps that reached completed or failed in this observation, in order.
    pub finished_steps: Vec<String>,
}

impl Task {
    /// Begins the first step of a task whose steps are synthesized.
    pub fn start_steps(&mut self, now: DateTime<Utc>) {
        if self.steps.is_empty() {
            let status = if self.status.is_terminal() {
                Status::Running
            } else {
                self.status
            };
            self.push_step("init", status, now);
        }
    }

    /// Merges `patch` into the task. Steps are merged (native) or derived from the status
    /// (synthesized). A terminal task changes no more.
    pub fn observe(
        &mut self,
        patch: TaskPatch,
        source: StepSource,
        now: DateTime<Utc>,
    ) -> Observation {
        let before = self.clone();
        let mut finished = Vec::new();
        // What the client gave a waiting step is recorded even when the task has ended in the
        // meantime (the agent finished fast, and a poll stored that first).
        if let Some((step_id, input)) = patch.answered {
            if let Some(step) = self.steps.iter_mut().find(|s| s.id == step_id) {
                step.input.text = input.text;
                step.input.params = input.params;
            }
        }
        if self.status.is_terminal() {
            let changed = *self != before;
            if changed {
                self.updated_at = now;
            }
            return Observation {
                changed,
                finished_steps: Vec::new(),
            };
        }
        if patch.next_turn {
            self.turn += 1;
        }
        if let Some(id) = patch.upstream_id {
            self.upstream_id = Some(id);
        }
        if let Some(name) = patch.name {
            self.name.get_or_insert(name);
        }
        if let Some(r) = patch.status_ref {
            self.status_ref = Some(r);
        }
        // Kept as the back sent it: the first answer that carries a payment request names it.
        if let Some(p) = patch.payment {
            self.payment.get_or_insert(p);
        }
        // The agent's words belong to the state they came with.
        if patch.message.is_some() || patch.status.is_some_and(|s| s != self.status) {
            self.message = patch.message;
        }
        if let Some(out) = patch.output {
            merge_output(&mut self.output, out);
        }
        match source {
            StepSource::Native => {
                if let Some(steps) = patch.steps {
                    for s in steps {
                        if let Some(id) = self.merge_step(s, now) {
                            finished.push(id);
                        }
                    }
                }
                if let Some(status) = patch.status {
                    self.status = status;
                }
                self.cost = patch
                    .cost
                    .unwrap_or_else(|| self.steps.iter().map(|s| s.cost).sum());
            }
            StepSource::Synthesized => {
                if let Some(status) = patch.status {
                    if status != self.status {
                        finished.extend(self.advance_steps(status, now));
                        self.status = status;
                    }
                }
                self.cost = self.steps.iter().map(|s| s.cost).sum();
            }
        }
        self.reason = match patch.reason {
            Some(r) => Some(r),
            None if patch.status.is_some() => None,
            None => self.reason.take(),
        };
        if self.status == Status::AwaitingInput {
            if let Some(req) = patch.input_request {
                self.input_request = Some(req);
            }
            // Fronts that speak in words need the question even when the agent only sent a
            // schema.
            if self.message.is_none() {
                self.message = self.input_request.as_ref().and_then(asked_for);
            }
        } else {
            self.input_request = None;
        }
        if self.status != before.status || self.reason != before.reason {
            self.status_since = Some(now);
        }
        let changed = *self != before;
        if changed {
            self.updated_at = now;
        }
        Observation {
            changed,
            finished_steps: finished,
        }
    }

    /// The synthesized step of the phase the task is leaving ends, and one for `next` begins
    /// (or, when `next` is terminal, the current step ends with it and carries the output).
    /// Returns the ids of the steps that finished.
    fn advance_steps(&mut self, next: Status, now: DateTime<Utc>) -> Vec<String> {
        self.start_steps(now);
        let mut finished = Vec::new();
        let output = self.output.clone();
        let Some(current) = self.steps.last_mut() else {
            return finished;
        };
        if next.is_terminal() {
            current.status = next;
            current.is_last = true;
            current.output = output;
            current.updated_at = now;
            if next != Status::Cancelled {
                finished.push(current.id.clone());
            }
            return finished;
        }
        current.status = Status::Completed;
        current.updated_at = now;
        finished.push(current.id.clone());
        self.push_step(next.name(), next, now);
        finished
    }

    fn push_step(&mut self, name: &str, status: Status, now: DateTime<Utc>) {
        let order = self.steps.len() as u32 + 1;
        let predecessor = self.steps.last().map(|s| s.id.clone());
        let input = if self.steps.is_empty() {
            self.input.clone()
        } else {
            Input::default()
        };
        self.steps.push(Step {
            id: uuid::Uuid::new_v4().to_string(),
            task_id: self.id.clone(),
            upstream_id: None,
            order,
            name: Some(name.to_string()),
            status,
            predecessor,
            is_last: false,
            input,
            output: Output::default(),
            cost: 0,
            created_at: now,
            updated_at: now,
        });
    }

    /// Merges one reported step; returns its id if it finished just now.
    fn merge_step(&mut self, s: StepPatch, now: DateTime<Utc>) -> Option<String> {
        let existing = self
            .steps
            .iter()
            .position(|e| match (&s.upstream_id, &e.upstream_id) {
                (Some(a), Some(b)) => a == b,
                (None, _) => s.order.is_some() && s.order == Some(e.order),
                _ => false,
            });
        let index = match existing {
            Some(i) => i,
            None => {
                let order = s.order.unwrap_or(self.steps.len() as u32 + 1);
                let predecessor = self.steps.last().map(|p| p.id.clone());
                self.steps.push(Step {
                    id: uuid::Uuid::new_v4().to_string(),
                    task_id: self.id.clone(),
                    upstream_id: s.upstream_id.clone(),
                    order,
                    name: None,
                    status: Status::Pending,
                    predecessor,
                    is_last: false,
                    input: Input::default(),
                    output: Output::default(),
                    cost: 0,
                    created_at: now,
                    updated_at: now,
                });
                self.steps.len() - 1
            }
        };
        let step = &mut self.steps[index];
        let was_finished = matches!(step.status, Status::Completed | Status::Failed);
        let before = step.clone();
        if let Some(n) = s.name {
            step.name = Some(n);
        }
        if let Some(st) = s.status {
            step.status = st;
        }
        if let Some(last) = s.is_last {
            step.is_last = last;
        }
        if let Some(i) = s.input {
            step.input = i;
        }
        if let Some(o) = s.output {
            merge_output(&mut step.output, o);
        }
        if let Some(c) = s.cost {
            step.cost = c;
        }
        if *step != before {
            step.updated_at = now;
        }
        let finished_now =
            !was_finished && matches!(step.status, Status::Completed | Status::Failed);
        finished_now.then(|| step.id.clone())
    }
}

fn merge_output(out: &mut Output, patch: OutputPatch) {
    if let Some(t) = patch.text {
        out.text = Some(t);
    }
    if let Some(a) = patch.additional {
        out.additional = Some(a);
    }
    if let Some(a) = patch.artifacts {
        out.artifacts = Some(a);
    }
}

/// What an input schema asks for, in words: "The agent needs more input: More details".
fn asked_for(schema: &serde_json::Value) -> Option<String> {
    let fields = schema.get("input_data")?.as_array()?;
    let names: Vec<&str> = fields
        .iter()
        .filter_map(|f| f.get("name").or_else(|| f.get("id")))
        .filter_map(serde_json::Value::as_str)
        .collect();
    (!names.is_empty()).then(|| format!("The agent needs more input: {}", names.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: Status) -> TaskPatch {
        TaskPatch {
            status: Some(s),
            ..TaskPatch::default()
        }
    }

    #[test]
    fn input_for_the_waiting_step_travels_in_the_patch_and_survives_a_redo() {
        let now = Utc::now();
        let mut t = Task::new("r", now);
        t.start_steps(now);
        t.observe(status(Status::AwaitingInput), StepSource::Synthesized, now);
        let waiting = t.steps.last().unwrap().id.clone();
        let mut answer = status(Status::Running);
        answer.next_turn = true;
        answer.answered = Some((
            waiting.clone(),
            Input {
                text: Some("more".into()),
                params: Some(serde_json::json!({"more": "yes"})),
                artifacts: None,
            },
        ));
        // The engine folds the same patch into whichever version of the task it stores: here the
        // one a concurrent poll wrote in between (a status id renewed).
        let mut newer = t.clone();
        newer.observe(
            TaskPatch {
                status_ref: Some("s-2".into()),
                ..TaskPatch::default()
            },
            StepSource::Synthesized,
            now,
        );
        // Or one that a poll found completed before the answer was stored.
        let mut ended = t.clone();
        ended.observe(status(Status::Completed), StepSource::Synthesized, now);
        ended.observe(answer.clone(), StepSource::Synthesized, now);
        let step = ended.steps.iter().find(|s| s.id == waiting).unwrap();
        assert_eq!(step.input.text.as_deref(), Some("more"));
        assert_eq!(ended.status, Status::Completed);
        for task in [&mut t, &mut newer] {
            let turn = task.turn;
            task.observe(answer.clone(), StepSource::Synthesized, now);
            let step = task.steps.iter().find(|s| s.id == waiting).unwrap();
            assert_eq!(step.input.text.as_deref(), Some("more"));
            assert_eq!(step.input.params, Some(serde_json::json!({"more": "yes"})));
            assert_eq!(task.turn, turn + 1);
            assert_eq!(task.status, Status::Running);
        }
    }

    #[test]
    fn synthesized_steps_follow_the_status_and_end_with_the_output() {
        let now = Utc::now();
        let mut t = Task::new("r", now);
        t.start_steps(now);
        assert_eq!(t.steps.len(), 1);
        let o = t.observe(status(Status::Pending), StepSource::Synthesized, now);
        assert!(!o.changed, "the same status again changes nothing");
        let o = t.observe(status(Status::Running), StepSource::Synthesized, now);
        assert_eq!(o.finished_steps, vec![t.steps[0].id.clone()]);
        t.observe(status(Status::AwaitingInput), StepSource::Synthesized, now);
        t.observe(status(Status::Running), StepSource::Synthesized, now);
        let mut done = status(Status::Completed);
        done.output = Some(OutputPatch {
            text: Some("HELLO".into()),
            ..OutputPatch::default()
        });
        let o = t.observe(done, StepSource::Synthesized, now);
        let names: Vec<_> = t.steps.iter().map(|s| s.name.clone().unwrap()).collect();
        assert_eq!(names, ["init", "running", "awaiting_input", "running"]);
        assert!(t.steps.iter().all(|s| s.status == Status::Completed));
        let last = t.steps.last().unwrap();
        assert!(last.is_last);
        assert_eq!(last.output.text.as_deref(), Some("HELLO"));
        assert_eq!(o.finished_steps, vec![last.id.clone()]);
        assert_eq!(
            t.steps[1].predecessor.as_deref(),
            Some(t.steps[0].id.as_str())
        );
        // Terminal: nothing changes any more.
        assert!(
            !t.observe(status(Status::Failed), StepSource::Synthesized, now)
                .changed
        );
    }

    #[test]
    fn native_steps_merge_by_upstream_id_and_finish_once() {
        let now = Utc::now();
        let mut t = Task::new("r", now);
        let step = |id: &str, st: Status| StepPatch {
            upstream_id: Some(id.into()),
            status: Some(st),
            cost: Some(2),
            ..StepPatch::default()
        };
        let patch = |steps| TaskPatch {
            status: Some(Status::Running),
            steps: Some(steps),
            ..TaskPatch::default()
        };
        let o = t.observe(
            patch(vec![
                step("a", Status::Completed),
                step("b", Status::Running),
            ]),
            StepSource::Native,
            now,
        );
        assert_eq!(o.finished_steps.len(), 1);
        let o = t.observe(
            patch(vec![
                step("a", Status::Completed),
                step("b", Status::Running),
            ]),
            StepSource::Native,
            now,
        );
        assert!(
            o.finished_steps.is_empty(),
            "a finished step is reported once"
        );
        assert!(!o.changed);
        assert_eq!(t.steps.len(), 2);
        assert_eq!(t.cost, 4);
    }

    #[test]
    fn input_request_lives_only_while_awaiting_input() {
        let now = Utc::now();
        let mut t = Task::new("r", now);
        let mut p = status(Status::AwaitingInput);
        p.input_request = Some(serde_json::json!({"input_data": []}));
        t.observe(p, StepSource::Synthesized, now);
        assert!(t.input_request.is_some());
        t.observe(status(Status::Running), StepSource::Synthesized, now);
        assert!(t.input_request.is_none());
    }
}
