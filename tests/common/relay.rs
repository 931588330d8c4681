//! A TCP relay in front of a service that can lose answers: each connection is passed through
//! byte for byte, except that, while [`Relay::lose`] names a request-line prefix, the answer to
//! a request starting with it is swallowed and the connection closed, after the service has
//! received (and acted on) the whole request — the failure a client cannot tell from "never
//! arrived" on a reused connection.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The relay, listening until dropped.
pub struct Relay {
    pub addr: SocketAddr,
    losing: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// A relay to `service` on a free port.
    pub async fn start(service: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay address");
        let losing: Arc<Mutex<Option<String>>> = Arc::default();
        let rule = losing.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let rule = rule.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(service).await {
                        pass(client, server, rule).await;
                    }
                });
            }
        });
        Relay { addr, losing, task }
    }

    /// From now on, the answers to requests whose first line starts with `prefix` are lost.
    pub fn lose(&self, prefix: &str) {
        *self.losing.lock().expect("the rule") = Some(prefix.to_string());
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Passes one connection through until either side closes, or an answer is lost.
async fn pass(client: TcpStream, server: TcpStream, rule: Arc<Mutex<Option<String>>>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Whether the request last seen starting is one whose answer is to be lost.
    let doomed = Arc::new(Mutex::new(false));
    let seen = doomed.clone();
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let prefix = rule.lock().expect("the rule").clone();
            if let Some(p) = prefix {
                if buf[..n].starts_with(p.as_bytes()) {
                    *seen.lock().expect("the flag") = true;
                }
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if *doomed.lock().expect("the flag") {
            // The service answered: the answer goes nowhere, and the connection ends.
            break;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    upstream.abort();
}
