//! get_task and list_steps: the stored task, refreshed from the back while it runs.

use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use mapping::dialect::{Canonical, Decoded};

impl Engine {
    /// get_task and list_steps: the stored task, refreshed from the back while it runs.
    pub(in crate::engine) async fn get(
        &self,
        t: &Translated,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let stored = self.load(t, &request.task_ref(), cx.identity).await?;
        let stored = self.refresh(t, stored, cx).await?;
        Ok(Canonical::front(stored.task))
    }
}
