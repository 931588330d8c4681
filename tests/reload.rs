//! Reloading the config while serving (issue 20): through the admin API, on a change of the
//! files, under load, and what a reload keeps (requests in flight, limits, tasks' prices, tasks
//! of removed routes). Each proxy serves a real file that the test rewrites.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::secrets::{token, ADMIN_TOKEN};
use common::wait::eventually;
use common::{client, sample_agent_on, text, Proxy, Upstream};
use samples::Clock;
use serde_json::{json, Value};

/// A config serving `routes` (name, path prefix, upstream), each to its own upstream named
/// after it, with the admin API and `[auth]` of the money tests; the file is not watched unless
/// `watch` (the admin API then reloads, not the watcher).
fn config(routes: &[(&str, &str, SocketAddr)], watch: bool, extra: &str) -> String {
    let mut rest = String::new();
    for (name, prefix, addr) in routes {
        rest.push_str(&format!(
            "[[upstreams]]\nname = \"{name}\"\naddress = \"{addr}\"\n\n\
             [[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"{name}\"\n{extra}\n\n"
        ));
    }
    paid_config(&rest).replace(
        "threads = 2\n",
        &format!("threads = 2\nwatch_config = {watch}\n"),
    )
}

/// Replaces the proxy's config file whole, as editors and deployments do (a rename over it).
fn write(proxy: &Proxy, text: &str) {
    let file = proxy.file();
    let data = proxy.data_dir().display().to_string();
    let next = file.with_extension("next");
    std::fs::write(&next, text.replace("{data_dir}", &data)).unwrap();
    std::fs::rename(&next, &file).unwrap();
}

async fn live_config(proxy: &Proxy) -> Value {
    let resp = client()
        .get(proxy.admin_url("/config"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, body) = common::status_and_json(resp).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn get(proxy: &Proxy, path: &str) -> (u16, String) {
    let resp = client().get(proxy.url(path)).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn named(body: &'static str) -> Upstream {
    Upstream::start(move |_req| async move { text(200, body) }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_added_changed_and_removed_by_the_admin_api_serve_at_once() {
    let (a, b) = (named("a").await, named("b").await);
    let proxy = Proxy::start_file(&config(&[("one", "/one", a.addr)], false, ""));
    assert_eq!(get(&proxy, "/two").await.0, 404);

    write(
        &proxy,
        &config(
            &[("one", "/one", a.addr), ("two", "/two", b.addr)],
            false,
            "",
        ),
    );
    let (status, body) = proxy.reload().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"], "ok");
    assert_eq!(body["trigger"], "admin");
    assert_eq!(body["generation"], 2);
    assert_eq!(
        body["changes"],
        json!({"added": ["two"], "changed": [], "removed": []})
    );
    assert_eq!(get(&proxy, "/two").await, (200, "b".to_string()));

    // A reload is a POST.
    let resp = client()
        .get(proxy.admin_url("/config/reload"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);

    // The same files again: nothing to do.
    let (status, body) = proxy.reload().await;
    assert_eq!(
        (status, &body["result"]),
        (200, &json!("unchanged")),
        "{body}"
    );

    // `one` now reaches b; `two` is gone.
    write(&proxy, &config(&[("one", "/one", b.addr)], false, ""));
    let (status, body) = proxy.reload().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["changes"],
        json!({"added": [], "changed": ["one"], "removed": ["two"]})
    );
    assert_eq!(get(&proxy, "/one").await, (200, "b".to_string()));
    assert_eq!(get(&proxy, "/two").await.0, 404);

    let live = live_config(&proxy).await;
    assert_eq!(live["generation"], 3);
    assert_eq!(live["routes"], json!(["one"]));
    assert_eq!(live["source"]["file"], proxy.file().display().to_string());
    assert_eq!(live["last_reload"]["result"], "ok");
    proxy
        .metrics_showing(&[
            "interlingua_config_reloads_total{result=\"ok\"} 2",
            "interlingua_config_reloads_total{result=\"unchanged\"} 1",
            "interlingua_config_reloads_total{result=\"invalid\"} 0",
            "interlingua_config_generation 3",
        ])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_changes_nothing_and_says_where() {
    let a = named("a").await;
    let good = config(&[("one", "/one", a.addr)], false, "");
    let proxy = Proxy::start_file(&good);
    let file = proxy.file().display().to_string();

    // A syntax error: the parser's position.
    write(&proxy, &good.replace("[[routes]]", "[[routes]"));
    let (status, body) = proxy.reload().await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["result"], "invalid");
    let problems = body["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{body}");
    let line = good
        .replace("{data_dir}", "x")
        .lines()
        .position(|l| l == "[[routes]]")
        .unwrap()
        + 1;
    assert!(
        problems[0]
            .as_str()
            .unwrap()
            .starts_with(&format!("{file}:{line}:")),
        "{body}"
    );

    // A setting that does not exist, and a route naming no upstream: both, each where it is.
    write(
        &proxy,
        &good
            .replace("threads = 2\n", "threads = 2\nthreds = 3\n")
            .replace("upstream = \"one\"", "upstream = \"nowhere\""),
    );
    let (status, body) = proxy.reload().await;
    assert_eq!(status, 422, "{body}");
    let problems: Vec<&str> = body["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(problems.len(), 2, "{body}");
    assert!(
        problems[0].starts_with(&format!("{file}:")) && problems[0].contains("threds"),
        "{body}"
    );
    assert!(
        problems[1].contains("routes[0].upstream") && problems[1].contains("nowhere"),
        "{body}"
    );

    // The old config serves on, and says what happened.
    assert_eq!(get(&proxy, "/one").await, (200, "a".to_string()));
    let live = live_config(&proxy).await;
    assert_eq!(live["generation"], 1);
    assert_eq!(live["last_reload"]["result"], "invalid");
    assert_eq!(live["last_reload"]["problems"].as_array().unwrap().len(), 2);
    proxy
        .metrics_showing(&[
            "interlingua_config_reloads_total{result=\"invalid\"} 2",
            "interlingua_config_generation 1",
        ])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_change_is_refused_and_nothing_else_applies() {
    let (a, b) = (named("a").await, named("b").await);
    let before = config(&[("one", "/one", a.addr)], false, "");
    let proxy = Proxy::start_file(&before);
    let after = config(
        &[("one", "/one", a.addr), ("two", "/two", b.addr)],
        false,
        "",
    )
    .replace(
        "[[listeners]]\naddress = \"127.0.0.1:0\"",
        "[[listeners]]\naddress = \"127.0.0.1:1\"",
    );
    write(&proxy, &after);
    let (status, body) = proxy.reload().await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["result"], "refused");
    assert_eq!(
        body["problems"],
        json!([format!(
            "{}: listeners: changed from [127.0.0.1:0 h2c] to [127.0.0.1:1 h2c]; this takes a restart (the running config is unchanged)",
            proxy.file().display()
        )])
    );
    assert_eq!(get(&proxy, "/two").await.0, 404);
    assert_eq!(get(&proxy, "/one").await, (200, "a".to_string()));
    proxy
        .metrics_showing(&["interlingua_config_reloads_total{result=\"refused\"} 1"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_ends_on_its_old_route() {
    let release = Arc::new(tokio::sync::Notify::new());
    let a = Upstream::held(release.clone(), "a").await;
    let b = named("b").await;
    let proxy = Proxy::start_file(&config(&[("main", "/", a.addr)], false, ""));
    let url = proxy.url("/held");
    let held = tokio::spawn(async move {
        let resp = client().get(url).send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    });
    a.wait_for_requests(1).await;

    write(&proxy, &config(&[("main", "/", b.addr)], false, ""));
    let (status, body) = proxy.reload().await;
    assert_eq!(
        (status, &body["changes"]["changed"]),
        (200, &json!(["main"])),
        "{body}"
    );
    assert_eq!(get(&proxy, "/next").await, (200, "b".to_string()));
    release.notify_one();
    assert_eq!(held.await.unwrap(), (200, "a".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_limits_keep_their_count_and_changed_ones_start_afresh() {
    let (a, b) = (named("a").await, named("b").await);
    let limited = |quota: &str, more: bool| {
        let mut routes = vec![("main", "/", a.addr)];
        if more {
            routes.push(("other", "/other", b.addr));
        }
        config(
            &routes,
            false,
            &format!("rate_limit = {{ route = \"{quota}\" }}"),
        )
    };
    let proxy = Proxy::start_file(&limited("2/h", false));
    assert_eq!(get(&proxy, "/").await.0, 200);
    assert_eq!(get(&proxy, "/").await.0, 200);
    assert_eq!(get(&proxy, "/").await.0, 429);

    // Another route added: `main`'s limit is the same, and so is its count.
    write(&proxy, &limited("2/h", true));
    assert_eq!(proxy.reload().await.0, 200);
    assert_eq!(get(&proxy, "/").await.0, 429);
    assert_eq!(get(&proxy, "/other").await.0, 200);

    // A new quota counts afresh.
    write(&proxy, &limited("3/h", true));
    assert_eq!(proxy.reload().await.0, 200);
    assert_eq!(get(&proxy, "/").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_admin_token_applies_at_once() {
    const ENV: &str = "INTERLINGUA_TEST_RELOADED_ADMIN_TOKEN";
    std::env::set_var(ENV, "the-second-admin-token");
    let a = named("a").await;
    let before = config(&[("main", "/", a.addr)], false, "");
    let proxy = Proxy::start_file(&before);
    let after = before.replace(common::secrets::ADMIN_ENV, ENV);
    assert_ne!(before, after);
    write(&proxy, &after);
    assert_eq!(proxy.reload().await.0, 200);
    let with = |t: &'static str| {
        client()
            .get(proxy.admin_url("/config"))
            .bearer_auth(t)
            .send()
    };
    assert_eq!(with(ADMIN_TOKEN).await.unwrap().status(), 401);
    assert_eq!(with("the-second-admin-token").await.unwrap().status(), 200);
}

const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000003";
const WORK: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_tasks_keep_their_price_and_a_removed_route_drains() {
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let parking = named("parked").await;
    let priced = |step: u64, paid: bool| {
        let mut rest = format!(
            "[[upstreams]]\nname = \"parking\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"parking\"\nmatch = {{ path_prefix = \"/parking\" }}\nupstream = \"parking\"\n\n",
            parking.addr
        );
        if paid {
            rest.push_str(&format!(
                "[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\nread_timeout = \"5s\"\n{}",
                paid_route("paid", "/", "mip", "nevermined", "mip003", "").replace(
                    "price = { hold = 1, step = 1 }",
                    &format!("price = {{ hold = 5, step = {step} }}")
                )
            ));
        }
        paid_config(&rest).replace("threads = 2\n", "threads = 2\nwatch_config = false\n")
    };
    let proxy = Proxy::start_file(&priced(2, true));
    let admin = Admin::new(&proxy);
    admin.grant("erin", 30).await;
    let bearer = token("erin");
    let start = |query: &'static str| {
        let req = client()
            .post(proxy.url(&format!("/api/v1/agents/{DID}/tasks")))
            .bearer_auth(&bearer)
            .json(&json!({ "input_query": query }))
            .send();
        async move {
            let resp = req.await.unwrap();
            assert_eq!(resp.status(), 201);
        }
    };

    // Started at 2 a step; the price goes up to 7 while it runs.
    start("started at 2").await;
    write(&proxy, &priced(7, true));
    assert_eq!(proxy.reload().await.0, 200);
    clock.advance(WORK);
    let settled = admin.settled("erin").await;
    assert_eq!(
        (settled["captured"].as_i64(), settled["available"].as_i64()),
        (Some(2), Some(28)),
        "{settled}"
    );

    // A task started now pays 7; its route is removed while it runs, and it is still followed
    // to its end on the route it started on.
    start("started at 7").await;
    write(&proxy, &priced(7, false));
    let (status, body) = proxy.reload().await;
    assert_eq!(
        (status, &body["changes"]["removed"]),
        (200, &json!(["paid"])),
        "{body}"
    );
    clock.advance(WORK);
    let settled = admin.settled("erin").await;
    assert_eq!(
        (settled["captured"].as_i64(), settled["available"].as_i64()),
        (Some(9), Some(21)),
        "{settled}"
    );
    let verify = client()
        .get(proxy.admin_url("/credits/verify"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, report) = common::status_and_json(verify).await;
    assert_eq!(status, 200);
    assert_eq!(report["holds"], json!([]), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_fail_no_request() {
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let version = |n: usize| {
        let mut routes = vec![("stable", "/stable", a.addr)];
        // `moving` goes back and forth between two agents; `extraN` comes and goes.
        routes.push((
            "moving",
            "/moving",
            if n % 2 == 0 { b.addr } else { c.addr },
        ));
        let extra = format!("extra{n}");
        let prefix = format!("/extra{n}");
        let mut text_routes: Vec<(String, String, SocketAddr)> = routes
            .into_iter()
            .map(|(r, p, a)| (r.to_string(), p.to_string(), a))
            .collect();
        text_routes.push((extra, prefix, a.addr));
        let borrowed: Vec<(&str, &str, SocketAddr)> = text_routes
            .iter()
            .map(|(r, p, a)| (r.as_str(), p.as_str(), *a))
            .collect();
        config(&borrowed, false, "")
    };
    let proxy = Arc::new(Proxy::start_file(&version(0)));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut clients = Vec::new();
    for i in 0..16 {
        let (proxy, done, ok, failed) = (proxy.clone(), done.clone(), ok.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            let http = client();
            let path = if i % 2 == 0 { "/stable" } else { "/moving" };
            while !done.load(Ordering::SeqCst) {
                let answer = match http.get(proxy.url(path)).send().await {
                    Ok(r) => (
                        r.status().as_u16(),
                        r.text().await.map_err(|e| e.to_string()),
                    ),
                    Err(e) => (0, Err(e.to_string())),
                };
                match answer {
                    (200, Ok(_)) => ok.fetch_add(1, Ordering::SeqCst),
                    other => {
                        eprintln!("{path}: {other:?}");
                        failed.fetch_add(1, Ordering::SeqCst)
                    }
                };
            }
        }));
    }
    for n in 1..=20 {
        write(&proxy, &version(n));
        let (status, body) = proxy.reload().await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["changes"],
            json!({"added": [format!("extra{n}")], "changed": ["moving"], "removed": [format!("extra{}", n - 1)]})
        );
        // Once the reload has answered, the removed route is gone and the new one serves.
        assert_eq!(get(&proxy, &format!("/extra{}", n - 1)).await.0, 404);
        assert_eq!(
            get(&proxy, &format!("/extra{n}")).await,
            (200, "a".to_string())
        );
        let expected = if n % 2 == 0 { "b" } else { "c" };
        assert_eq!(get(&proxy, "/moving").await, (200, expected.to_string()));
    }
    done.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::SeqCst), 0);
    assert!(ok.load(Ordering::SeqCst) >= 16, "the clients made requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_the_config_file_reloads_it_and_a_half_written_one_waits_for_the_rest() {
    let (a, b) = (named("a").await, named("b").await);
    let proxy = Proxy::start_file(&config(&[("one", "/one", a.addr)], true, ""));
    let whole = config(
        &[("one", "/one", a.addr), ("two", "/two", b.addr)],
        true,
        "",
    );

    // Half of the new file, written in place: invalid, and the old config serves on.
    let data = proxy.data_dir().display().to_string();
    let text = whole.replace("{data_dir}", &data);
    let cut = text.rfind("[[routes]]").unwrap() + "[[rou".len();
    std::fs::write(proxy.file(), &text[..cut]).unwrap();
    proxy
        .metrics_showing(&["interlingua_config_reloads_total{result=\"invalid\"} 1"])
        .await;
    assert_eq!(get(&proxy, "/one").await, (200, "a".to_string()));

    // The rest of it: reloaded, no request to the admin API needed.
    std::fs::write(proxy.file(), &text).unwrap();
    proxy
        .metrics_showing(&[
            "interlingua_config_reloads_total{result=\"ok\"} 1",
            "interlingua_config_generation 2",
        ])
        .await;
    assert_eq!(get(&proxy, "/two").await, (200, "b".to_string()));
    assert_eq!(live_config(&proxy).await["last_reload"]["trigger"], "file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_mapping_file_reloads_it() {
    let a = named("a").await;
    let maps = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mappings/mip003.toml"),
    )
    .unwrap();
    std::fs::write(maps.path().join("mip003.toml"), &original).unwrap();
    let text = config(
        &[("job", "/", a.addr)],
        true,
        "front = \"mip003\"\nback = \"mip003\"",
    )
    .replace(
        "watch_config = true\n",
        &format!(
            "watch_config = true\nmappings_dir = \"{}\"\n",
            maps.path().display()
        ),
    );
    let proxy = Proxy::start_file(&text);

    // A comment changes nothing but the file: reloaded all the same (the digest is of the text).
    let mapping = maps.path().join("mip003.toml");
    std::fs::write(&mapping, format!("{original}\n# edited\n")).unwrap();
    proxy
        .metrics_showing(&["interlingua_config_reloads_total{result=\"ok\"} 1"])
        .await;
    // A broken mapping is reported where it is, and changes nothing.
    std::fs::write(&mapping, format!("{original}\n[nonsense\n")).unwrap();
    proxy
        .metrics_showing(&["interlingua_config_reloads_total{result=\"invalid\"} 1"])
        .await;
    let live = eventually("the failed reload's report", || async {
        let live = live_config(&proxy).await;
        if live["last_reload"]["result"] == "invalid" {
            Ok(live)
        } else {
            Err(live)
        }
    })
    .await;
    let problem = live["last_reload"]["problems"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(problem.contains("mip003.toml:"), "{live}");
    assert_eq!(live["generation"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_set_file_applies_after_a_reload() {
    use common::tokens::{claims, set_key, sign};
    use jsonwebtoken::Algorithm;
    let a = named("a").await;
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("keys.json");
    let (old_jwk, old_key) = set_key(0, "old");
    let (new_jwk, new_key) = set_key(1, "new");
    std::fs::write(&set, json!({ "keys": [old_jwk] }).to_string()).unwrap();
    // Refreshed on an unknown `kid` at most hourly: only a reload reads the file again here.
    let key = format!(
        "\n[[auth.keys]]\nid = \"set\"\ntype = \"jwks\"\njwks_file = \"{}\"\nrefresh_interval = \"1h\"\nalgorithms = [\"ES256\"]\n\n",
        set.display()
    );
    let text = config(&[("main", "/", a.addr)], false, "auth = true");
    let text = text.replacen("[[upstreams]]", &format!("{key}[[upstreams]]"), 1);
    let proxy = Proxy::start_file(&text);
    let who = claims(json!({"iss": null, "aud": null, "sub": "erin"}));
    let call = |key: &jsonwebtoken::EncodingKey, kid: &str| {
        let bearer = sign(Algorithm::ES256, Some(kid), key, &who);
        let req = client().get(proxy.url("/")).bearer_auth(bearer).send();
        async move { req.await.unwrap().status().as_u16() }
    };
    assert_eq!(call(&old_key, "old").await, 200);
    assert_eq!(call(&new_key, "new").await, 401);

    // The operator rotates the file and reloads: the config text is the same, the keys are not.
    std::fs::write(&set, json!({ "keys": [new_jwk] }).to_string()).unwrap();
    let (status, body) = proxy.reload().await;
    assert_eq!((status, &body["result"]), (200, &json!("ok")), "{body}");
    assert_eq!(call(&new_key, "new").await, 200);
    assert_eq!(call(&old_key, "old").await, 401);
}

/// Reading files is no change: a server whose config and mapping files are read over and over
/// (as `cat`, an editor opening them, or `interlingua token mint -c FILE` do) reloads nothing,
/// while an edit in place and a rename over the file each still reload once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_the_files_reloads_nothing_and_edits_still_do() {
    let (a, b) = (named("a").await, named("b").await);
    let maps = tempfile::tempdir().unwrap();
    let mapping = maps.path().join("mip003.toml");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mappings/mip003.toml"),
        &mapping,
    )
    .unwrap();
    let with_maps = |text: String| {
        text.replace(
            "watch_config = true\n",
            &format!(
                "watch_config = true\nmappings_dir = \"{}\"\n",
                maps.path().display()
            ),
        )
    };
    let proxy = Proxy::start_file(&with_maps(config(&[("one", "/one", a.addr)], true, "")));
    let file = proxy.file();

    // Longer than the watcher's longest gathering of a burst (2 s): had the reads counted, a
    // reload would have been made in this window, and the edit below would be the second.
    let reading = std::time::Instant::now() + Duration::from_millis(2500);
    let mut reads = 0u64;
    while std::time::Instant::now() < reading {
        for f in [&file, &mapping] {
            reads += std::fs::read(f).unwrap().len() as u64;
        }
        tokio::task::yield_now().await;
    }
    assert!(reads > 0);

    // An edit in place: the first reload, and the only one.
    let two = with_maps(config(
        &[("one", "/one", a.addr), ("two", "/two", b.addr)],
        true,
        "",
    ));
    let data = proxy.data_dir().display().to_string();
    std::fs::write(&file, two.replace("{data_dir}", &data)).unwrap();
    let metrics = proxy
        .metrics_showing(&[
            "interlingua_config_reloads_total{result=\"ok\"} 1",
            "interlingua_config_generation 2",
        ])
        .await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "interlingua_config_reloads_total{result=\"unchanged\"} 0"),
        "the reads made reloads:\n{metrics}"
    );
    assert_eq!(get(&proxy, "/two").await, (200, "b".to_string()));

    // A new file renamed over the old one: reloaded too.
    write(
        &proxy,
        &with_maps(config(&[("two", "/two", b.addr)], true, "")),
    );
    proxy
        .metrics_showing(&[
            "interlingua_config_reloads_total{result=\"ok\"} 2",
            "interlingua_config_reloads_total{result=\"unchanged\"} 0",
            "interlingua_config_generation 3",
        ])
        .await;
    assert_eq!(get(&proxy, "/one").await.0, 404);
}
