//! search_steps: the steps of the caller's tasks on a route, as a list of their own (a Nevermined
//! builder's step search and step lists, which name steps by id across tasks).

use serde_json::Value;

use super::search::paging;
use crate::engine::tasks::cx_subject;
use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use mapping::dialect::doc::{standalone_step, Page, TaskRef};
use mapping::dialect::{Canonical, Decoded};
use mapping::task::{Status, Task};
use store::TaskQuery;

/// How many of the caller's tasks a search without a task or step reads, newest first: a step
/// search is a look at recent work, not an export (pages then cut the steps found).
const TASKS_SEARCHED: u32 = 1000;

impl Engine {
    /// search_steps: steps of this route's tasks (the caller's, on routes with auth) that fit
    /// every filter given (`search.task_id`, `search.step_id`, `search.status`, `search.name`,
    /// `search.agents`), newest task first, then in step order; each step also carries `agent`,
    /// its task's. A search naming a task (404 when the caller has no such task) or a step reads
    /// that task fresh from the back first, as get_task does.
    pub(in crate::engine) async fn search_steps(
        &self,
        t: &Translated,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let search = request.search();
        let (page, page_size) = paging(&search);
        let step_id = search.step_id;
        let status = match search.status {
            Some(s) => Some(
                Status::from_name(&s)
                    .ok_or_else(|| ProxyError::InvalidRequest(format!("`{s}` is not a status")))?,
            ),
            None => None,
        };
        let name = search.name;
        let agents = search.agents;
        let subject = cx_subject(t, cx.identity).map(str::to_string);

        let named = match search.task_id {
            Some(id) => Some(id),
            None => match &step_id {
                // The task holding the step, looked up among the caller's on this route.
                Some(step) => {
                    let query = TaskQuery {
                        route: Some(t.route.clone()),
                        subject: subject.clone(),
                        holding_step: Some(step.clone()),
                        page: 1,
                        page_size: 10,
                        ..TaskQuery::default()
                    };
                    let (found, _) = self.find(&query).await?;
                    match found
                        .into_iter()
                        .find(|task| task.steps.iter().any(|s| &s.id == step))
                    {
                        Some(task) => Some(task.id),
                        None => return Ok(found_steps(Vec::new(), page, page_size)),
                    }
                }
                None => None,
            },
        };
        let tasks: Vec<Task> = match named {
            Some(id) => {
                let stored = self.load(t, &TaskRef::id(id), cx.identity).await?;
                vec![self.refresh(t, stored, cx).await?.task]
            }
            None => {
                let query = TaskQuery {
                    route: Some(t.route.clone()),
                    subject,
                    page: 1,
                    page_size: TASKS_SEARCHED,
                    ..TaskQuery::default()
                };
                self.find(&query).await?.0
            }
        };
        let mut steps = Vec::new();
        for task in &tasks {
            if agents
                .as_ref()
                .is_some_and(|a| !task.agent.as_ref().is_some_and(|g| a.contains(g)))
            {
                continue;
            }
            for step in &task.steps {
                let fits = step_id.as_ref().is_none_or(|id| &step.id == id)
                    && status.is_none_or(|s| step.status == s)
                    && name.as_ref().is_none_or(|n| step.name.as_ref() == Some(n));
                if fits {
                    steps.push(standalone_step(task, step));
                }
            }
        }
        Ok(found_steps(steps, page, page_size))
    }
}

/// One page of the steps found, with the search's totals.
fn found_steps(all: Vec<Value>, page: u64, page_size: u64) -> Canonical<'static> {
    let total = all.len() as u64;
    let skip = ((page - 1) * page_size) as usize;
    let steps: Vec<Value> = all
        .into_iter()
        .skip(skip)
        .take(page_size as usize)
        .collect();
    let page = Page {
        total,
        page,
        page_size,
    };
    Canonical::empty().with_steps(steps, page)
}
