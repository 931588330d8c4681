//! Child processes that end with the process that started them, not with the thread.
//!
//! A server started through `setpriv --pdeathsig SIG` gets SIG from the kernel when the thread
//! that started it ends, even when the process is killed and no `Drop` runs. A test's own thread
//! ends with the test, and a `spawn_blocking` thread whenever tokio retires it, so the servers
//! here are started from one spawner thread that lives as long as the process.

use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Spawn = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts `command` from the spawner thread, which lives as long as the process, so that a
/// parent-death signal (`setpriv --pdeathsig`) comes when the process ends, not when the calling
/// thread does. The spawn's own result: `Err` if the program could not be started.
pub fn spawn(command: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Spawn>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Spawn>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut command, answer) in rx {
                    let _ = answer.send(command.spawn());
                }
                // Every sender gone cannot happen (the static keeps one): park forever anyway.
                loop {
                    std::thread::park();
                }
            })
            .expect("the spawner thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((command, tx))
        .expect("the spawner thread runs");
    rx.recv().expect("the spawner thread answers")
}
