//! search_tasks: the route's tasks from the store (the caller's, on routes with auth).

use crate::auth::Identity;
use crate::engine::tasks::cx_subject;
use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use mapping::dialect::doc::{Page, Search};
use mapping::dialect::{Canonical, Decoded};
use mapping::task::Status;
use store::TaskQuery;

/// The page a search asks for (from 1) and its size (1 to 1000; 10 unless said).
/// What a search_tasks request asks the store for: this route's tasks (the caller's, on routes
/// with auth) that match it; with the page and page size it asked for.
pub(in crate::engine) fn search_query(
    t: &Translated,
    request: &Decoded,
    identity: Option<&Identity>,
) -> (TaskQuery, u64, u64) {
    let search = request.search();
    let (page, page_size) = paging(&search);
    let query = TaskQuery {
        route: Some(t.route.clone()),
        subject: cx_subject(t, identity).map(str::to_string),
        status: search.status.and_then(|s| Status::from_name(&s)),
        name: search.name,
        conversation: None,
        id: search.task_id,
        holding_step: None,
        page: page as u32,
        page_size: page_size as u32,
    };
    (query, page, page_size)
}

pub(in crate::engine) fn paging(search: &Search) -> (u64, u64) {
    let page = search.page.unwrap_or(1).max(1);
    let page_size = search.page_size.unwrap_or(10).clamp(1, 1000);
    (page, page_size)
}

impl Engine {
    /// search_tasks: from the store, this route's tasks only.
    pub(in crate::engine) async fn search(
        &self,
        t: &Translated,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let (query, page, page_size) = search_query(t, request, cx.identity);
        let (tasks, total) = self.find(&query).await?;
        let page = Page {
            total,
            page,
            page_size,
        };
        Ok(Canonical::empty().with_tasks(&tasks, page))
    }
}
