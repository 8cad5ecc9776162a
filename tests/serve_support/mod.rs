//! A real `rocky serve` process on 127.0.0.1 with an ephemeral port, and curl as its client:
//! what the serve_* tests share.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub port: u16,
    /// Everything the server wrote to standard error so far.
    log: Arc<Mutex<String>>,
    dir: PathBuf,
}

/// A sandbox directory per server: its own XDG_RUNTIME_DIR and no tuning database.
fn sandbox() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rocky-serve-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Server {
    /// Starts `rocky serve MODEL --port 0 ARGS…` and waits for its "listening on" line.
    /// Without `--cpu`, on the GPU path, named (`--device auto`): where the only Vulkan device
    /// is a CPU implementation (lavapipe in CI) the default is rocky's CPU path.
    pub fn start(model: &Path, args: &[&str]) -> Server {
        let named = if args.contains(&"--cpu") || args.contains(&"--device") {
            &[][..]
        } else {
            &["--device", "auto"][..]
        };
        Server::start_as_given(model, &[args, named].concat())
    }

    /// [`Server::start`] with `args` only: the device as rocky chooses it without flags.
    pub fn start_as_given(model: &Path, args: &[&str]) -> Server {
        let dir = sandbox();
        let mut child = Command::new(env!("CARGO_BIN_EXE_rocky"))
            .arg("serve")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .env("XDG_RUNTIME_DIR", &dir)
            .env("ROCKY_DB", dir.join("none.sled"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rocky serve starts");
        let log = Arc::new(Mutex::new(String::new()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        // Drains standard error for the whole life of the server (a full pipe would block it).
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split("listening on http://").nth(1) {
                    let port = addr
                        .rsplit(':')
                        .next()
                        .unwrap()
                        .trim()
                        .parse::<u16>()
                        .unwrap();
                    let _ = port_tx.send(port);
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let port = match port_rx.recv_timeout(Duration::from_secs(300)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                panic!("rocky serve did not start:\n{}", log.lock().unwrap());
            }
        };
        Server {
            child,
            port,
            log,
            dir,
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// POSTs `body` (sent as is, so malformed bodies can be sent too) and returns the status
    /// and the body.
    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        curl(&self.url(path), Some(body), &[])
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        curl(&self.url(path), None, &[])
    }

    /// POSTs and parses the answer as JSON.
    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = self.post(path, &body.to_string());
        let v = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("not JSON ({e}), status {status}: {text}"));
        (status, v)
    }

    /// A streaming request: the status and the `data:` payloads in order.
    pub fn stream(&self, path: &str, body: &Value) -> (u16, Vec<String>) {
        let (status, text) = curl(&self.url(path), Some(&body.to_string()), &["-N"]);
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect();
        (status, data)
    }

    /// The server's resident memory, KiB (VmRSS of /proc/PID/status).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/PID/status of the server");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"))
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// curl with `extra` flags; the body goes through standard input so any bytes can be sent.
pub fn curl(url: &str, body: Option<&str>, extra: &[&str]) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "300", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url);
    if body.is_some() {
        cmd.args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
        ]);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl runs (apt-get install curl)");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(body.unwrap_or("").as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code.trim().parse().unwrap_or_else(|_| {
        panic!(
            "curl gave no status: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, body.to_string())
}

/// `rocky generate`'s greedy continuation of `prompt` (the independent path: the CLI, one
/// fresh process, no server, no reuse), as its --json reports it.
pub fn generate_greedy(model: &Path, prompt: &str, n: usize, chat: bool) -> Value {
    generate_greedy_with(model, prompt, n, chat, &[])
}

/// [`generate_greedy`] with more arguments (`--cpu`).
pub fn generate_greedy_with(
    model: &Path,
    prompt: &str,
    n: usize,
    chat: bool,
    extra: &[&str],
) -> Value {
    let dir = sandbox();
    let n = n.to_string();
    let mut args = vec![
        "generate",
        model.to_str().unwrap(),
        "--prompt",
        prompt,
        "-n",
        &n,
    ];
    args.extend(["--temp", "0", "--json"]);
    if chat {
        args.push("--chat");
    }
    args.extend(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(&args)
        .env("XDG_RUNTIME_DIR", &dir)
        .env("ROCKY_DB", dir.join("none.sled"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn elapsed_ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}
