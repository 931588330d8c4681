//! A real headless Chromium, driven through chromedriver (WebDriver) with fantoccini: Debian's
//! `chromium` and `chromium-driver` (`.ci/run` installs them), or the binaries named by
//! `INTERLINGUA_CHROMIUM` and `INTERLINGUA_CHROMEDRIVER`. The driver is killed when the
//! [`Browser`] is dropped; each browser has a fresh profile in a temporary directory.
//!
//! Included by the tests that need it (`#[path]`), so that the others do not link a WebDriver
//! client.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::common::wait::eventually;

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

fn binary(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.is_file(),
        "{} is missing: apt-get install chromium chromium-driver (or set {env})",
        path.display()
    );
    path
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session through it.
    pub async fn start() -> Browser {
        let chromium = binary("INTERLINGUA_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = binary("INTERLINGUA_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let status = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        eventually("chromedriver to be ready", || async {
            let body: serde_json::Value = status
                .get(format!("{url}/status"))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            if body["value"]["ready"] == true {
                Ok(())
            } else {
                Err(body.to_string())
            }
        })
        .await;
        let profile = tempfile::tempdir().expect("a profile directory");
        let mut caps = Capabilities::new();
        caps.insert(
            "goog:chromeOptions".to_string(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-extensions", "--disable-default-apps",
                    "--no-first-run", "--window-size=1280,900", "--force-device-scale-factor=1",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a Chromium session");
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// The text of the element `css` selects, once there is one.
    pub async fn text(&self, css: &str) -> String {
        self.client
            .wait()
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}` on the page: {e}"))
            .text()
            .await
            .expect("its text")
    }

    /// Whether an element `css` selects is on the page now.
    pub async fn has(&self, css: &str) -> bool {
        !self
            .client
            .find_all(Locator::Css(css))
            .await
            .expect("find")
            .is_empty()
    }

    /// Fills the form `css` selects with `fields`, submits it with its submit button, and returns
    /// once the answer has replaced the page. WebDriver's click returns before the navigation it
    /// starts ends: without the wait, what a test reads next may be the old page (its `#status`
    /// still `running`), or vanish under it (a stale element reference).
    pub async fn submit(&self, css: &str, fields: &[(&str, &str)]) {
        let before = self
            .client
            .find(Locator::Css("html"))
            .await
            .expect("the page");
        let form = self.client.form(Locator::Css(css)).await.expect("the form");
        for (name, value) in fields {
            form.set_by_name(name, value).await.expect("set a field");
        }
        form.submit_with(Locator::Css("button[type=submit]"))
            .await
            .expect("submit");
        eventually(
            &format!("the answer to `{css}` to replace the page"),
            || async {
                match before.tag_name().await {
                    Err(e) if e.is_stale_element_reference() => Ok(()),
                    Err(e) => Err(format!("the old page: {e}")),
                    Ok(_) => Err("the old page is still shown".to_string()),
                }
            },
        )
        .await;
    }

    /// A PNG of the page, written to `docs/console/<name>.png` when `INTERLINGUA_SCREENSHOTS`
    /// is set (the README's pictures); otherwise nothing.
    pub async fn screenshot(&self, name: &str) {
        if std::env::var_os("INTERLINGUA_SCREENSHOTS").is_none() {
            return;
        }
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console");
        std::fs::create_dir_all(&dir).expect("docs/console");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write the screenshot");
    }
}

impl Browser {
    /// Ends the session (Chromium quits), then the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        // A test that failed before `close` leaves its Chromium running: end it by its profile.
        let _ = Command::new("pkill")
            .arg("-f")
            .arg(self._profile.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
