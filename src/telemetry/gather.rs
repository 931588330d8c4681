//! The log's writer thread: lines gather in memory and go out together, a few times a second
//! under load.
//!
//! A channel to a writer thread (what `tracing-appender` does) wakes that thread for nearly every
//! line: on two busy cores, at 9 000 requests a second, 3 600 context switches a second for the
//! access log alone, and 11–12 % of the CPU a durable create costs went to the access log. Here a
//! line is appended to a shared buffer under a lock; only the line that finds the buffer empty
//! wakes the thread, which then waits [`GATHER`] for the lines behind it and writes them all in
//! one call. A line is never dropped: when the sink falls behind and the buffer reaches its
//! limit, loggers wait for room.

use std::io::Write;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long the thread, once woken by a line, waits for more before writing: at most this much
/// later a line is out.
pub const GATHER: Duration = Duration::from_millis(5);

/// What loggers and the thread share.
struct Shared {
    state: Mutex<State>,
    /// A first line arrived, or the writer is closing.
    ready: Condvar,
    /// The thread took the buffer: there is room again.
    room: Condvar,
    /// Loggers wait for room above this many bytes.
    limit: usize,
}

struct State {
    lines: Vec<u8>,
    closing: bool,
}

/// A handle loggers write lines through; cheap to clone.
#[derive(Clone)]
pub struct Gathered {
    shared: Arc<Shared>,
}

/// Ends the writer thread when dropped, after it has written every line given to it.
pub struct Flush {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the thread writing to `sink`; loggers wait for room beyond `limit` bytes.
pub fn start<W: Write + Send + 'static>(
    sink: W,
    limit: usize,
    name: &str,
) -> std::io::Result<(Gathered, Flush)> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            lines: Vec::new(),
            closing: false,
        }),
        ready: Condvar::new(),
        room: Condvar::new(),
        limit: limit.max(1),
    });
    let theirs = shared.clone();
    let thread = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || serve(&theirs, sink))?;
    Ok((
        Gathered {
            shared: shared.clone(),
        },
        Flush {
            shared,
            thread: Some(thread),
        },
    ))
}

fn serve<W: Write>(shared: &Shared, mut sink: W) {
    let mut out = Vec::new();
    loop {
        let closing = {
            let mut state = shared.state.lock();
            while state.lines.is_empty() && !state.closing {
                shared.ready.wait(&mut state);
            }
            state.closing
        };
        if !closing {
            std::thread::sleep(GATHER);
        }
        let closing = {
            let mut state = shared.state.lock();
            std::mem::swap(&mut out, &mut state.lines);
            shared.room.notify_all();
            state.closing
        };
        if !out.is_empty() {
            // Nowhere to report a failing log sink; the lines are dropped, the loggers go on.
            let _ = sink.write_all(&out).and_then(|()| sink.flush());
            out.clear();
        }
        if closing {
            let state = shared.state.lock();
            if state.lines.is_empty() {
                return;
            }
        }
    }
}

impl Write for Gathered {
    /// Takes the whole of `buf` (one formatted event: it is never split between two writes).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        while !state.lines.is_empty()
            && state.lines.len() + buf.len() > shared.limit
            && !state.closing
        {
            shared.room.wait(&mut state);
        }
        let first = state.lines.is_empty();
        state.lines.extend_from_slice(buf);
        drop(state);
        if first {
            shared.ready.notify_one();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Gathered {
    type Writer = Gathered;

    fn make_writer(&'a self) -> Gathered {
        self.clone()
    }
}

impl Drop for Flush {
    fn drop(&mut self) {
        self.shared.state.lock().closing = true;
        self.shared.ready.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::start;

    /// A sink that hands each write to the test.
    struct Tap(mpsc::Sender<Vec<u8>>);

    impl Write for Tap {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.send(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_from_many_threads_all_come_out_whole_and_in_each_threads_order() {
        let (tx, rx) = mpsc::channel();
        let (writer, flush) = start(Tap(tx), 1 << 20, "test-log").expect("thread starts");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut w = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000 {
                        w.write_all(format!("thread {t} line {i}\n").as_bytes())
                            .expect("a line is taken");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("logger thread");
        }
        drop(flush);
        let text = String::from_utf8(rx.try_iter().flatten().collect()).expect("utf-8");
        let mut next = [0usize; 4];
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            assert_eq!(words.len(), 4, "a whole line: {line:?}");
            let t: usize = words[1].parse().expect("thread number");
            assert_eq!(words[3], next[t].to_string(), "thread {t} in order");
            next[t] += 1;
        }
        assert_eq!(next, [2_000; 4]);
    }

    #[test]
    fn lines_beyond_the_limit_wait_for_room_and_none_is_lost() {
        // A sink that takes one write, then blocks until the test lets it go on.
        struct Gate(mpsc::Receiver<()>, mpsc::Sender<Vec<u8>>);
        impl Write for Gate {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let _ = self.1.send(buf.to_vec());
                let _ = self.0.recv();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (go, gate) = mpsc::channel();
        let (tx, rx) = mpsc::channel();
        let (mut writer, flush) = start(Gate(gate, tx), 16, "test-log").expect("thread starts");
        writer.write_all(b"first line\n").expect("taken");
        // The sink now holds the first batch; two more lines fill the buffer past its limit.
        let first = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("first write");
        assert_eq!(first, b"first line\n");
        writer.write_all(b"second line\n").expect("taken");
        let (done, finished) = mpsc::channel();
        let mut blocked = writer.clone();
        std::thread::spawn(move || {
            blocked.write_all(b"third line\n").expect("taken");
            let _ = done.send(());
        });
        // The third waits while the sink is stuck (the buffer holds 12 of 16 bytes)...
        assert!(finished.recv_timeout(Duration::from_millis(200)).is_err());
        // ...and goes in once the sink moves on and the thread takes the buffer.
        let deadline = Instant::now() + Duration::from_secs(10);
        while finished.try_recv().is_err() {
            assert!(Instant::now() < deadline, "the third line never got room");
            let _ = go.send(());
            std::thread::yield_now();
        }
        drop(go);
        drop(flush);
        let rest: Vec<u8> = rx.try_iter().flatten().collect();
        assert_eq!(rest, b"second line\nthird line\n");
    }

    #[test]
    fn a_lone_line_is_written_within_moments_without_a_flush() {
        let (tx, rx) = mpsc::channel();
        let (mut writer, _flush) = start(Tap(tx), 1 << 20, "test-log").expect("thread starts");
        writer.write_all(b"alone\n").expect("taken");
        let got = rx.recv_timeout(Duration::from_secs(10)).expect("written");
        assert_eq!(got, b"alone\n");
    }
}
