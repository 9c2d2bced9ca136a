//! The request path allocates nothing for a typical body: parse, vectorize, search and the
//! decision body, counted by a global allocator that records every allocation on this thread.

use function::{Readiness, Request, Scorer, SearchParams, Searcher};
use index_pack::format::{self, CodecKind, DIMS, KEY_DIMS};
use index_pack::layout::{self, LayoutParams, References};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// 5,000 references on a coarse grid (binary dims 0 or 1), a fifth with the -1 sentinel.
fn references() -> References {
    let mut refs = References::default();
    let mut x: u64 = 7;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    for _ in 0..5_000 {
        let mut v = [0i16; DIMS];
        let sentinel = next() % 5 == 0;
        for (d, k) in v.iter_mut().enumerate() {
            *k = if KEY_DIMS.contains(&d) {
                (next() % 2) as i16 * 10_000
            } else if sentinel && (d == 5 || d == 6) {
                -10_000
            } else {
                (next() % 10_001) as i16
            };
        }
        refs.vectors.push(v);
        refs.fraud.push(next() % 3 == 0);
    }
    refs
}

const BODIES: [&str; 3] = [
    r#"{"id":"tx-1","transaction":{"amount":41.12,"installments":2,"requested_at":"2026-03-11T18:45:53Z"},"customer":{"avg_amount":82.24,"tx_count_24h":3,"known_merchants":["MERC-003","MERC-016"]},"merchant":{"id":"MERC-016","mcc":"5411","avg_amount":60.25},"terminal":{"is_online":false,"card_present":true,"km_from_home":29.23},"last_transaction":null}"#,
    r#"{"id":"tx-853640735","transaction":{"amount":5293.06,"installments":8,"requested_at":"2028-09-19T03:34:29Z"},"customer":{"avg_amount":60.14,"tx_count_24h":11,"known_merchants":["MERC-009","MERC-001","MERC-004","MERC-002","MERC-009"]},"merchant":{"id":"MERC-087","mcc":"7995","avg_amount":21.57},"terminal":{"is_online":false,"card_present":false,"km_from_home":265.7823290829},"last_transaction":{"timestamp":"2024-01-04T03:43:32Z","km_from_current":722.9372664641}}"#,
    r#"{"id":"tx-1641912674","transaction":{"amount":441.59,"installments":1,"requested_at":"2027-07-09T16:31:06Z"},"customer":{"avg_amount":883.18,"tx_count_24h":1,"known_merchants":["MERC-004","MERC-017"]},"merchant":{"id":"MERC-004","mcc":"5411","avg_amount":302.78},"terminal":{"is_online":true,"card_present":true,"km_from_home":33.8814492067},"last_transaction":{"timestamp":"2027-06-04T14:14:22Z","km_from_current":18.4353521556}}"#,
];

#[test]
fn scoring_a_typical_request_allocates_nothing() {
    let params = LayoutParams {
        codec: CodecKind::I16,
        block_rows: 32,
        ..LayoutParams::default()
    };
    let bytes = format::aligned_copy(&format::to_artifact(&layout::build_sampled(
        &references(),
        40,
        &params,
    )));
    let scorer = Scorer::new(Searcher::new(
        format::open(&bytes).unwrap(),
        SearchParams::default(),
    ));
    let answer = |body: &str| {
        scorer.handle(
            &Request {
                content_type: Some(b"application/json"),
                ..Request::new("POST", "/fraud-score", body.as_bytes())
            },
            Readiness::Ready,
        )
    };
    // The first searches size this thread's scratch buffers once.
    for body in BODIES {
        assert_eq!(answer(body).status, 200);
    }
    let before = allocations();
    for _ in 0..100 {
        for body in BODIES {
            assert_eq!(answer(body).status, 200);
        }
    }
    assert_eq!(allocations() - before, 0, "allocations on the request path");
    // The counter itself works: an error answer builds its message.
    let before = allocations();
    assert_eq!(answer("{").status, 400);
    assert!(allocations() > before);
}
