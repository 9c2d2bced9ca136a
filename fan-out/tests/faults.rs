//! The faults a fan-out meets, each against stand-ins of the Lambda Invoke API on loopback (the
//! CI's `shards` fault step repeats them against real shards under AWS's emulator): a throttle
//! retried, a shard that never answers, one that fails while another is slow, one that answers
//! garbage, too few neighbours, a duplicate, or for another set; and the proof of the tiling.

use fan_out::{Fanout, ShardTarget};
use function::shard::{NearestResponse, ShardNeighbour};
use index_pack::format::{Identity, SetPart};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a stand-in answers one invocation with.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn identity(number: u32, first: u32, references: u32) -> Identity {
    Identity {
        references_sha256: "ab".repeat(32),
        references,
        first_position: first,
        end_position: first + references,
        part: SetPart::Shard {
            number,
            count: 2,
            total: 200,
            set_sha256: "cd".repeat(32),
        },
        format_version: 6,
        codec: "i16".into(),
        crc32: format!("{number:08x}"),
        packer: "stand-in".into(),
        edited_by: Vec::new(),
    }
}

/// Shard `k`'s right answer (shard 0 holds positions 0..100, shard 1 100..200).
fn answer(k: u32) -> NearestResponse {
    let first = 100 * k;
    NearestResponse {
        neighbours: (0..5)
            .map(|i| ShardNeighbour {
                position: first + i,
                fraud: i % 2 == 0,
                distance: i64::from(10 * (i + 1) + k),
                labeller_distance: f64::from(10 * (i + 1) + k) * 1e-8,
            })
            .collect(),
        index: identity(k, first, 100),
        search_ns: 1,
    }
}

fn ok(body: impl serde::Serialize) -> Reply {
    Reply {
        status: 200,
        headers: vec![("x-amz-executed-version", "$LATEST".into())],
        body: serde_json::to_string(&body).unwrap(),
        delay: Duration::ZERO,
    }
}

/// A stand-in Invoke API answering its `n`-th invocation (from 0) with `reply(n)`.
struct StandIn {
    target: ShardTarget,
    calls: Arc<AtomicUsize>,
}

fn stand_in(reply: impl Fn(usize) -> Reply + Send + Sync + 'static) -> StandIn {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let calls = Arc::new(AtomicUsize::new(0));
    let (counted, reply) = (calls.clone(), Arc::new(reply));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (counted, reply) = (counted.clone(), reply.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut w = stream;
                loop {
                    let mut length = 0;
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                length = v.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    r.read_exact(&mut body).unwrap();
                    let n = counted.fetch_add(1, Ordering::SeqCst);
                    let a = reply(n);
                    std::thread::sleep(a.delay);
                    let mut out = format!(
                        "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                        a.status,
                        a.body.len()
                    );
                    for (k, v) in &a.headers {
                        out += &format!("{k}: {v}\r\n");
                    }
                    out += "\r\n";
                    out += &a.body;
                    if w.write_all(out.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    StandIn {
        target: format!("http://127.0.0.1:{port}#shard").parse().unwrap(),
        calls,
    }
}

/// A front over two stand-ins; its proof is taken (the first invocation of each).
async fn front(a: &StandIn, b: &StandIn, timeout: Duration) -> Fanout {
    let f = Fanout::new(vec![a.target.clone(), b.target.clone()], timeout)
        .await
        .unwrap();
    f.prove().await.unwrap();
    f
}

/// Shard 1 answers the proof right, then `then` for every later invocation.
fn shard1_then(then: impl Fn(usize) -> Reply + Send + Sync + 'static) -> StandIn {
    stand_in(move |n| if n == 0 { ok(answer(1)) } else { then(n) })
}

#[tokio::test]
async fn right_shards_merge_and_a_throttle_is_retried() {
    let (a, b) = (stand_in(|_| ok(answer(0))), stand_in(|_| ok(answer(1))));
    let f = front(&a, &b, Duration::from_secs(2)).await;
    let merged = f.nearest(&[0; 14]).await.unwrap();
    let positions: Vec<u32> = merged.neighbours.iter().map(|n| n.position).collect();
    assert_eq!(positions, [0, 100, 1, 101, 2]);
    // Throttled once (429, TooManyRequestsException): the SDK's retry answers.
    let throttled = shard1_then(|n| {
        if n == 1 {
            Reply {
                status: 429,
                headers: vec![("x-amzn-errortype", "TooManyRequestsException".into())],
                body: r#"{"Reason":"ReservedFunctionConcurrentInvocationLimitExceeded","Type":"User","message":"Rate Exceeded."}"#.into(),
                delay: Duration::ZERO,
            }
        } else {
            ok(answer(1))
        }
    });
    let f = front(&a, &throttled, Duration::from_secs(2)).await;
    assert!(f.nearest(&[0; 14]).await.is_ok());
    assert_eq!(
        throttled.calls.load(Ordering::SeqCst),
        3,
        "proof, throttle, retry"
    );
}

#[tokio::test]
async fn a_shard_that_does_not_answer_in_time_is_a_504_naming_it() {
    let a = stand_in(|_| ok(answer(0)));
    let slow = shard1_then(|_| Reply {
        delay: Duration::from_secs(3),
        ..ok(answer(1))
    });
    let f = front(&a, &slow, Duration::from_millis(300)).await;
    let t = Instant::now();
    let e = f.nearest(&[0; 14]).await.unwrap_err();
    assert!(e.timed_out, "{e:?}");
    assert_eq!(
        e.summary(),
        format!("shard 1 ({}) did not answer within 300 ms", slow.target)
    );
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

/// The first shard to fail ends the request: the slow one is not awaited.
#[tokio::test]
async fn the_first_failure_ends_the_request_at_once() {
    let failing = stand_in(|n| {
        if n == 0 {
            ok(answer(0))
        } else {
            Reply {
                headers: vec![("x-amz-function-error", "Unhandled".into())],
                body: r#"{"errorMessage":"secret detail"}"#.into(),
                ..ok(())
            }
        }
    });
    let slow = shard1_then(|_| Reply {
        delay: Duration::from_secs(2),
        ..ok(answer(1))
    });
    let f = front(&failing, &slow, Duration::from_secs(5)).await;
    let t = Instant::now();
    let e = f.nearest(&[0; 14]).await.unwrap_err();
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert!(!e.timed_out);
    assert_eq!(e.what, "failed (Unhandled)");
    // What the shard said goes to the log, never to the caller.
    assert!(!e.summary().contains("secret") && e.detail.contains("secret detail"));
    let r = function::Response::shard_unavailable(&e);
    assert_eq!(r.status, 502);
    assert!(!r.body.contains("secret"), "{}", r.body);
}

/// Every wrong answer of a proven shard is a 502 naming it and what was wrong.
#[tokio::test]
async fn wrong_answers_are_502s_naming_the_shard() {
    let a = stand_in(|_| ok(answer(0)));
    type Wrong = fn() -> Reply;
    let cases: [(Wrong, &str); 5] = [
        (
            || Reply {
                body: "<html>garbage</html>".into(),
                ..ok(())
            },
            "answered something else than a shard's answer",
        ),
        (
            || {
                let mut x = answer(1);
                x.neighbours.pop();
                ok(x)
            },
            "answered 4 neighbours where 5 are due",
        ),
        (
            || {
                let mut x = answer(1);
                x.neighbours[4].position = x.neighbours[3].position;
                ok(x)
            },
            "answered position 103 twice",
        ),
        (
            || {
                let mut x = answer(1);
                x.neighbours[4].position = 50;
                ok(x)
            },
            "answered position 50, outside its range 100..200",
        ),
        (
            || {
                let mut x = answer(1);
                x.index.crc32 = "deadbeef".into();
                ok(x)
            },
            "answered for another index (shard 1 of 2, CRC32 deadbeef) than the one proven (shard 1 of 2, CRC32 00000001)",
        ),
    ];
    for (reply, what) in cases {
        let shard = shard1_then(move |_| reply());
        let f = front(&a, &shard, Duration::from_secs(2)).await;
        let e = f.nearest(&[0; 14]).await.unwrap_err();
        assert_eq!((e.timed_out, e.what.as_str()), (false, what));
        assert!(e.shard.starts_with("shard 1 (http://127.0.0.1:"), "{e:?}");
    }
}

/// The shards must tile one set before the front answers anything.
#[tokio::test]
async fn shards_that_do_not_tile_one_set_are_never_proven() {
    let a = stand_in(|_| ok(answer(0)));
    let f = Fanout::new(
        vec![a.target.clone(), a.target.clone()],
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let e = f.prove().await.unwrap_err();
    assert!(e.contains("shard 1 answered as shard 0 of 2"), "{e}");
    let e = f.nearest(&[0; 14]).await.unwrap_err();
    assert!(e.summary().contains("not proven"), "{e:?}");
    let gap = stand_in(|_| {
        let mut x = answer(1);
        x.index.first_position = 101;
        for (i, n) in x.neighbours.iter_mut().enumerate() {
            n.position = 101 + i as u32;
        }
        ok(x)
    });
    let f = Fanout::new(
        vec![a.target.clone(), gap.target.clone()],
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let e = f.prove().await.unwrap_err();
    assert!(e.contains("a gap"), "{e}");
}
