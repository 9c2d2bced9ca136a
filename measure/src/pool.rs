//! `cargo measure pool`: the front over S shards under AWS's emulator as Lambda would take its
//! concurrent invocations. The emulator runs one invocation at a time (a second concurrent one
//! crashes it), where Lambda gives each an execution environment of its own: here each shard
//! runs under `--pool` emulators behind one HAProxy endpoint ([`pool_proxy`]), which can also
//! hold each invocation `--invoke-ms` (a model of the Invoke API's round trip on AWS, which the
//! emulator on loopback lacks). Serves until stopped; load it with wrk or k6.

use anyhow::Result;
use std::path::Path;
use std::time::Duration;
use xtask::shards;
use xtask::util::{self, log};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    set: shards::SetArgs,
    /// Emulators per shard.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=16))]
    pool: u32,
    /// Milliseconds the pool's HAProxy holds each invocation before passing it on.
    #[arg(long, default_value_t = 0)]
    invoke_ms: u32,
}

pub fn run(a: Args) -> Result<()> {
    let dirs = a.set.prepare()?;
    // Declared in the order they stop in reverse: the front first, the emulators last.
    let emulators = shards::start_emulators(&dirs, a.pool)?;
    let members: Vec<Vec<String>> =
        emulators.iter().map(|e| e.iter().map(shards::base_url).collect()).collect();
    let (_proxy, endpoints) = pool_proxy(&dirs[0].with_file_name("pool"), &members, a.invoke_ms)?;
    // A request the front gives up on would free its emulator in HAProxy while the emulator
    // still runs it, and the next would crash it: the front waits instead.
    let timeout = [("FRAUD_SHARD_TIMEOUT_MS", "60000")];
    let front = shards::start_front(&dirs, &a.set.listen, &endpoints, &timeout)?;
    log!("pool: serving until stopped (Ctrl-C)");
    let _ = front.0.wait();
    Ok(())
}

/// One HAProxy (mode http) in `dir` with a frontend per shard over its emulators, each server
/// given one request at a time (`maxconn 1`; the others queue), each request held `invoke_ms`
/// first (a Lua action that yields: other requests go on meanwhile); the frontends' URLs.
/// A request whose client went away (the front drops a request's invocations when its own
/// client leaves) frees its emulator in HAProxy while the emulator still runs it: a second
/// invocation then would crash the emulator, so queued ones of gone clients are dropped
/// (`abortonclose`), and a load must leave the pool a moment between runs. The emulator still
/// crashes now and then on invocations back to back; the health check takes it out of the pool.
fn pool_proxy(
    dir: &Path,
    members: &[Vec<String>],
    invoke_ms: u32,
) -> Result<(util::Killed, Vec<String>)> {
    std::fs::create_dir_all(dir)?;
    let lua = dir.join("invoke.lua");
    let action = "core.register_action('invoke', {'http-req'}, function(txn) core.msleep(";
    std::fs::write(&lua, format!("{action}{invoke_ms}) end)\n"))?;
    let mut cfg = format!(
        "global\n    maxconn 4096\n    lua-load {}\ndefaults\n    mode http\n    option abortonclose\n    timeout connect 1s\n    timeout client 60s\n    timeout server 60s\n    timeout queue 60s\n",
        lua.display()
    );
    let mut endpoints = Vec::new();
    for (k, urls) in members.iter().enumerate() {
        let bind = util::free_port()?;
        let hold = if invoke_ms > 0 { "    http-request lua.invoke\n" } else { "" };
        cfg += &format!("frontend shard{k}\n    bind {bind}\n{hold}    default_backend shard{k}\n");
        cfg += &format!("backend shard{k}\n    balance leastconn\n");
        for (i, url) in urls.iter().enumerate() {
            let url = url.trim_start_matches("http://");
            cfg += &format!("    server e{i} {url} maxconn 1 check inter 1s\n");
        }
        endpoints.push(format!("http://{bind}"));
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg)?;
    let haproxy = util::cmd!("haproxy", "-db", "-f", &path);
    let proxy = util::Killed(util::to_log(haproxy, &dir.join("haproxy.log")).start()?);
    for e in &endpoints {
        let addr: std::net::SocketAddr = e.trim_start_matches("http://").parse()?;
        let listening = || Ok(std::net::TcpStream::connect(addr).map_err(|e| e.to_string()));
        util::poll(
            "the pool's HAProxy",
            Duration::from_secs(10),
            Duration::from_millis(5),
            listening,
        )?;
    }
    log!("pool: {} emulators per shard behind HAProxy ({})", members[0].len(), path.display());
    Ok((proxy, endpoints))
}
