//! Reloading when the files change: the config file and the mapping files in `mappings_dir`,
//! watched with `notify` (inotify on Linux).
//!
//! The directories are watched, not the files: editors and Kubernetes ConfigMaps replace a file
//! by renaming another over it, and a watch on the file itself would be lost with its inode.
//! Bursts of events (an editor's write, rename and chmod) are gathered into one reload: it
//! starts once the files have been quiet for [`QUIET`], or [`AT_MOST`] after the first event.
//! A half-written file fails validation and changes nothing; the write that completes it
//! reloads again. Only events that can change what a file holds count: reading a file (a `cat`,
//! an editor opening it, the reload's own reading of the mapping files) is no change, nor is a
//! change of its mode or times. `[server] watch_config = false` turns this off.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Reloader, Trigger};
use crate::setup::Source;

/// How long the files must be quiet before a reload starts.
pub const QUIET: Duration = Duration::from_millis(250);
/// The longest a reload waits after the first event, however busy the files are.
pub const AT_MOST: Duration = Duration::from_secs(2);

/// What is watched: a config file by name in its directory, and the `*.toml` files of a
/// mappings directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watched {
    config: Option<PathBuf>,
    mappings_dir: PathBuf,
}

impl Watched {
    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .config
            .iter()
            .map(|f| parent(f))
            .chain([self.mappings_dir.clone()])
            .collect();
        dirs.dedup();
        dirs
    }

    /// Whether a change at `path` may change the setup.
    fn concerns(&self, path: &Path) -> bool {
        if let Some(config) = &self.config {
            if path.file_name() == config.file_name() && same_dir(path, config) {
                return true;
            }
        }
        // A new mapping file may shadow a built-in dialect; any `*.toml` there counts.
        path.extension().is_some_and(|e| e == "toml")
            && path.parent().is_some_and(|p| same(p, &self.mappings_dir))
    }
}

fn parent(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn same(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    same(&parent(a), &parent(b))
}

/// Follows the files of `reloader`'s config until the runtime stops. Returns at once (logging
/// why) when the files cannot be watched.
pub fn spawn(reloader: Arc<Reloader>, runtime: &tokio::runtime::Handle) {
    let (tx, rx) = mpsc::unbounded_channel::<PathBuf>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else {
            return;
        };
        if changes_content(&event.kind) {
            for path in event.paths {
                let _ = tx.send(path);
            }
        }
    });
    let watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(
                "cannot watch the config files (reload with SIGHUP or the admin API): {e}"
            );
            return;
        }
    };
    let mut watcher = watcher;
    // Armed before the server answers its first request: a change made from then on is seen.
    let armed = arm(&mut watcher, None, wanted(&reloader));
    runtime.spawn(follow(reloader, watcher, armed, rx));
}

/// Whether an event of this kind can change what a file holds: a file made, written, renamed
/// or removed. An access (an open, a read, a close) cannot, nor can a change of its metadata
/// (mode, owner, times); counting them would reload on every `cat`, and for ever, since each
/// reload reads the mapping files. A kind the platform cannot tell counts.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Any => true,
        EventKind::Modify(ModifyKind::Metadata(_) | ModifyKind::Other) => false,
        EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Name(_) | ModifyKind::Any) => true,
        EventKind::Access(_) | EventKind::Other => false,
    }
}

/// What the live config wants watched.
fn wanted(reloader: &Reloader) -> Watched {
    Watched {
        config: match reloader.source() {
            Source::File(path) => Some(path.clone()),
            Source::Text { .. } => None,
        },
        mappings_dir: reloader.state.live().config.server.mappings_dir.clone(),
    }
}

/// Watches the directories of `wanted` in place of those of `armed`.
fn arm(watcher: &mut RecommendedWatcher, armed: Option<&Watched>, wanted: Watched) -> Watched {
    if let Some(old) = armed {
        for dir in old.dirs() {
            let _ = watcher.unwatch(&dir);
        }
    }
    for dir in wanted.dirs() {
        if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), "cannot watch for config changes: {e}");
        }
    }
    wanted
}

async fn follow(
    reloader: Arc<Reloader>,
    mut watcher: RecommendedWatcher,
    mut armed: Watched,
    mut events: mpsc::UnboundedReceiver<PathBuf>,
) {
    loop {
        let Some(first) = events.recv().await else {
            return;
        };
        if !armed.concerns(&first) {
            continue;
        }
        if !settle(&mut events, QUIET, AT_MOST).await {
            return;
        }
        if !reloader.state.live().config.server.watch_config {
            continue;
        }
        reloader.reload(Trigger::File).await;
        // A reload may have moved the mappings directory.
        let now = wanted(&reloader);
        if now != armed {
            armed = arm(&mut watcher, Some(&armed), now);
        }
    }
}

/// Waits, after a first event, until no event came for `quiet`, or `at_most` passed since the
/// first. `false` when the events ended (the watcher is gone).
pub async fn settle<T>(
    events: &mut mpsc::UnboundedReceiver<T>,
    quiet: Duration,
    at_most: Duration,
) -> bool {
    let deadline = Instant::now() + at_most;
    loop {
        let until = (Instant::now() + quiet).min(deadline);
        tokio::select! {
            event = events.recv() => {
                if event.is_none() {
                    return false;
                }
            }
            _ = tokio::time::sleep_until(until) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_events_settles_once_quiet_or_at_the_cap() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        // Quiet after the first event: settles QUIET later.
        let start = Instant::now();
        assert!(settle(&mut rx, QUIET, AT_MOST).await);
        assert_eq!(start.elapsed(), QUIET);

        // Events every 100 ms keep it waiting, up to the cap.
        let sender = tx.clone();
        let feeder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if sender.send(()).is_err() {
                    return;
                }
            }
        });
        let start = Instant::now();
        assert!(settle(&mut rx, QUIET, AT_MOST).await);
        assert_eq!(start.elapsed(), AT_MOST);
        feeder.abort();

        // The watcher gone: no reload.
        drop(tx);
        let _ = feeder.await;
        while rx.try_recv().is_ok() {}
        assert!(!settle(&mut rx, QUIET, AT_MOST).await);
    }

    #[test]
    fn only_events_that_can_change_a_file_count() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, MetadataKind};
        use notify::event::{RemoveKind, RenameMode};
        let counted = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Content)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ];
        let ignored = [
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Permissions)),
            EventKind::Other,
        ];
        for kind in counted {
            assert!(changes_content(&kind), "{kind:?}");
        }
        for kind in ignored {
            assert!(!changes_content(&kind), "{kind:?}");
        }
    }

    #[test]
    fn only_the_config_file_and_mapping_files_concern_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let maps = dir.path().join("mappings");
        std::fs::create_dir(&maps).unwrap();
        let w = Watched {
            config: Some(dir.path().join("interlingua.toml")),
            mappings_dir: maps.clone(),
        };
        assert!(w.concerns(&dir.path().join("interlingua.toml")));
        assert!(!w.concerns(&dir.path().join("interlingua.toml.swp")));
        assert!(!w.concerns(&dir.path().join("other.toml")));
        assert!(w.concerns(&maps.join("a2a.toml")));
        assert!(!w.concerns(&maps.join("README.md")));
        assert_eq!(w.dirs(), vec![dir.path().to_path_buf(), maps]);
    }
}
