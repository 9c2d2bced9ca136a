//! Structured payloads: an `arbitrary`-derived description of a request, rendered to JSON with
//! optional damage, and the answer the spec implies for it, computed here independently of the
//! `function` crate (SPEC.md's vector table, its own calendar arithmetic). Raw bytes rarely get
//! past the JSON parser; these reach the vectorizer and the search on most inputs.

use arbitrary::Arbitrary;
use index_pack::format::DIMS;

/// A number field: mostly realistic values, plus the edges the spec calls out.
#[derive(Arbitrary, Debug, Clone)]
pub enum Num {
    /// n / 100, written with two decimals (what the contest generator produces).
    Cents(u32),
    /// A negative amount of cents.
    NegCents(u16),
    /// A value from [`EDGES`].
    Edge(u8),
    /// Any finite double, written in its shortest round-trip form.
    Float(f64),
    /// An integer literal.
    Int(i64),
    /// Mantissa and exponent, e.g. `123e-4`.
    Exp(i32, i16),
    /// Not a number JSON can carry, or not a number at all: always a 400.
    Bad(u8),
}

/// Values at the clamps, the 4-decimal rounding boundary, zero and the extremes of f64.
const EDGES: [&str; 24] = [
    "0",
    "-0",
    "-0.0",
    "1",
    "-1",
    "0.00005",
    "0.00004999",
    "0.00015",
    "9999.99995",
    "10000",
    "10000.00001",
    "12",
    "20",
    "1000",
    "1440",
    "0.5",
    "5e-324",
    "2.2250738585072014e-308",
    "1.7976931348623157e308",
    "-1.7976931348623157e308",
    "1e308",
    "4.9999e-5",
    "123456789012345678901234567890",
    "0.000000000000000000000000000001",
];

const BAD_NUMBERS: [&str; 10] = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "\"12\"",
    "null",
    "true",
    "[]",
    "{}",
];

impl Num {
    /// The JSON token.
    fn render(&self) -> String {
        match self {
            Num::Cents(n) => format!("{}.{:02}", n / 100, n % 100),
            Num::NegCents(n) => format!("-{}.{:02}", n / 100, n % 100),
            Num::Edge(i) => EDGES[*i as usize % EDGES.len()].to_string(),
            Num::Float(f) if f.is_finite() => serde_json::to_string(f).unwrap(),
            Num::Float(_) => "0".to_string(),
            Num::Int(i) => i.to_string(),
            Num::Exp(m, e) => format!("{m}e{e}"),
            Num::Bad(i) => BAD_NUMBERS[*i as usize % BAD_NUMBERS.len()].to_string(),
        }
    }
}

/// The value a valid number token stands for, as serde_json reads it (the scorer's parser;
/// reading it any other way would test serde_json's float parsing, not the scorer), or None
/// when the token is no JSON number a request may carry.
fn number_value(token: &str) -> Option<f64> {
    serde_json::from_str::<f64>(token).ok()
}

/// An RFC 3339 timestamp, in or out of range.
#[derive(Arbitrary, Debug, Clone)]
pub struct Ts {
    /// When set, every component is reduced into its valid range.
    strict: bool,
    year: u16,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    fraction: Option<u32>,
    sep: u8,
    offset: Offset,
    /// Replace the whole text with something else (always a 400).
    garbage: Option<Garbage>,
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Offset {
    Z,
    LowerZ,
    Plus(u8, u8),
    Minus(u8, u8),
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Garbage {
    Text(String),
    Truncated(u8),
    Number(u32),
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn month_days(y: i64, m: i64) -> i64 {
    const DAYS: [i64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if m == 2 && is_leap(y) {
        29
    } else {
        DAYS[(m - 1) as usize]
    }
}

/// Days from 1970-01-01 to y-m-d, counted year by year from a 400-year cycle anchor (a
/// different method from the scorer's, on purpose).
fn days_since_epoch(y: i64, m: i64, d: i64) -> i64 {
    // 2000-01-01 is day 10957; a 400-year cycle has 146097 days.
    let cycles = (y - 2000).div_euclid(400);
    let mut year = 2000 + cycles * 400;
    let mut days = 10_957 + cycles * 146_097;
    while year < y {
        days += if is_leap(year) { 366 } else { 365 };
        year += 1;
    }
    for month in 1..m {
        days += month_days(y, month);
    }
    days + d - 1
}

/// Seconds since the epoch (fraction kept), UTC hour, weekday (Monday = 0).
#[derive(Clone, Copy, Debug)]
struct Instant {
    seconds: f64,
    hour: i64,
    weekday: i64,
}

impl Ts {
    fn parts(&self) -> [i64; 6] {
        let (y, mo, d, h, mi, s) = (
            self.year as i64 % 10_000,
            self.month as i64,
            self.day as i64,
            self.hour as i64,
            self.minute as i64,
            self.second as i64,
        );
        if self.strict {
            let y = 1970 + y % 130;
            let mo = 1 + mo % 12;
            [y, mo, 1 + d % month_days(y, mo), h % 24, mi % 60, s % 60]
        } else {
            [y, mo % 14, d % 33, h % 26, mi % 62, s % 63]
        }
    }

    fn offset(&self) -> Option<(i64, i64, i64)> {
        let reduce = |h: u8, m: u8| -> (i64, i64) {
            if self.strict {
                (h as i64 % 24, m as i64 % 60)
            } else {
                (h as i64 % 26, m as i64 % 62)
            }
        };
        match self.offset {
            Offset::Z | Offset::LowerZ => None,
            Offset::Plus(h, m) => {
                let (h, m) = reduce(h, m);
                Some((1, h, m))
            }
            Offset::Minus(h, m) => {
                let (h, m) = reduce(h, m);
                Some((-1, h, m))
            }
        }
    }

    fn render(&self) -> String {
        let [y, mo, d, h, mi, s] = self.parts();
        let base = format!(
            "{y:04}-{mo:02}-{d:02}{}{h:02}:{mi:02}:{s:02}",
            b"Tt "[self.sep as usize % 3] as char
        );
        let fraction = self.fraction.map_or(String::new(), |f| format!(".{f}"));
        let offset = match (&self.offset, self.offset()) {
            (Offset::LowerZ, _) => "z".to_string(),
            (_, None) => "Z".to_string(),
            (_, Some((sign, h, m))) => {
                format!("{}{h:02}:{m:02}", if sign > 0 { '+' } else { '-' })
            }
        };
        let text = format!("{base}{fraction}{offset}");
        match &self.garbage {
            None => text,
            Some(Garbage::Text(t)) => t.clone(),
            Some(Garbage::Truncated(n)) => text[..(*n as usize % text.len())].to_string(),
            Some(Garbage::Number(n)) => n.to_string(),
        }
    }

    /// Whether the rendered value is a JSON string the scorer must accept.
    fn is_string(&self) -> bool {
        !matches!(self.garbage, Some(Garbage::Number(_)))
    }

    /// The instant, or None when the text is not a valid timestamp.
    fn instant(&self) -> Option<Instant> {
        if self.garbage.is_some() {
            // Garbage text could by chance be a valid timestamp: decided by the caller.
            return None;
        }
        let [y, mo, d, h, mi, s] = self.parts();
        if !(1..=12).contains(&mo) || d < 1 || d > month_days(y, mo) {
            return None;
        }
        if h > 23 || mi > 59 || s > 60 {
            return None;
        }
        let off = match self.offset() {
            None => 0,
            Some((sign, oh, om)) => {
                if oh > 23 || om > 59 {
                    return None;
                }
                sign * (oh * 3600 + om * 60)
            }
        };
        let whole = days_since_epoch(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - off;
        let fraction = self
            .fraction
            .map_or(0.0, |f| format!("0.{f}").parse::<f64>().unwrap());
        Some(Instant {
            seconds: whole as f64 + fraction,
            hour: whole.rem_euclid(86_400) / 3600,
            weekday: (whole.div_euclid(86_400) + 3).rem_euclid(7),
        })
    }
}

/// A JSON string field: a short id drawn from a small set (so known-merchant matches are
/// common), optionally written with a `\u` escape, or any text.
#[derive(Arbitrary, Debug, Clone)]
pub enum Text {
    Merchant { n: u8, escaped: bool },
    Mcc { n: u8, escaped: bool },
    Any(String),
}

const MCCS: [&str; 13] = [
    "5411", "5812", "5912", "5944", "7801", "7802", "7995", "4511", "5311", "5999", "0000", "541",
    "54110",
];

impl Text {
    /// The decoded value.
    fn value(&self) -> String {
        match self {
            Text::Merchant { n, .. } => format!("MERC-{:03}", n % 24),
            Text::Mcc { n, .. } => MCCS[*n as usize % MCCS.len()].to_string(),
            Text::Any(s) => s.clone(),
        }
    }

    /// The JSON token; an escaped form makes serde hand the scorer an owned string.
    fn render(&self) -> String {
        match self {
            Text::Merchant { escaped: true, .. } | Text::Mcc { escaped: true, .. } => {
                let v = self.value();
                let first = v.chars().next().unwrap();
                format!("\"\\u{:04x}{}\"", first as u32, &v[1..])
            }
            _ => serde_json::to_string(&self.value()).unwrap(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Last {
    Null,
    Missing,
    Some { timestamp: Ts, km: Num },
}

/// A request as the fuzzer describes it.
#[derive(Arbitrary, Debug, Clone)]
pub struct GenPayload {
    id: Option<Text>,
    amount: Num,
    installments: Num,
    requested_at: Ts,
    avg_amount: Num,
    tx_count_24h: Num,
    known_merchants: Vec<Text>,
    merchant_id: Text,
    mcc: Text,
    merchant_avg_amount: Num,
    is_online: bool,
    card_present: bool,
    km_from_home: Num,
    last: Last,
    /// Unknown fields, ignored by the scorer.
    extra: Option<(u8, String)>,
    /// Key order: reverse the members of every object.
    reverse: bool,
    /// Whitespace between tokens.
    spaced: bool,
    damage: Vec<Damage>,
}

/// Ways to break a valid request; each names a field by its position in [`FIELDS`].
#[derive(Arbitrary, Debug, Clone)]
pub enum Damage {
    Drop(u8),
    Null(u8),
    WrongType(u8),
    Duplicate(u8),
    TrailingGarbage,
    Truncate(u16),
}

/// Every field by path; the ones a request may omit or set to null are marked.
const FIELDS: [(&str, bool); 22] = [
    ("id", true),
    ("transaction", false),
    ("transaction.amount", false),
    ("transaction.installments", false),
    ("transaction.requested_at", false),
    ("customer", false),
    ("customer.avg_amount", false),
    ("customer.tx_count_24h", false),
    ("customer.known_merchants", false),
    ("merchant", false),
    ("merchant.id", false),
    ("merchant.mcc", false),
    ("merchant.avg_amount", false),
    ("terminal", false),
    ("terminal.is_online", false),
    ("terminal.card_present", false),
    ("terminal.km_from_home", false),
    ("last_transaction", true),
    ("last_transaction.timestamp", false),
    ("last_transaction.km_from_current", false),
    ("customer.known_merchants.0", false),
    ("extra", true),
];

/// A JSON value under construction: raw tokens, arrays and objects with ordered members.
#[derive(Clone, Debug)]
enum Node {
    Raw(String),
    Arr(Vec<Node>),
    Obj(Vec<(String, Node)>),
}

impl Node {
    fn write(&self, out: &mut String, spaced: bool) {
        let sp = if spaced { " " } else { "" };
        match self {
            Node::Raw(t) => out.push_str(t),
            Node::Arr(items) => {
                out.push('[');
                for (i, n) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                        out.push_str(sp);
                    }
                    n.write(out, spaced);
                }
                out.push(']');
            }
            Node::Obj(members) => {
                out.push('{');
                for (i, (k, n)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(sp);
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    out.push_str(sp);
                    n.write(out, spaced);
                }
                out.push_str(sp);
                out.push('}');
            }
        }
    }

    /// The member at a dotted path (array elements by number), with its parent's member list.
    fn find(&mut self, path: &str) -> Option<(&mut Vec<(String, Node)>, usize)> {
        let (head, rest) = match path.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (path, None),
        };
        match self {
            Node::Obj(members) => {
                let i = members.iter().position(|(k, _)| k == head)?;
                match rest {
                    None => Some((members, i)),
                    Some(r) => members[i].1.find(r),
                }
            }
            Node::Arr(items) => {
                let i: usize = head.parse().ok()?;
                // Array elements are addressed only as the last step; wrap the list so the
                // caller sees a member list.
                let item = items.get_mut(i)?;
                match rest {
                    None => None,
                    Some(r) => item.find(r),
                }
            }
            Node::Raw(_) => None,
        }
    }
}

/// What the scorer must answer for a generated request.
#[derive(Clone, Debug, PartialEq)]
pub enum Expect {
    /// 200 with the decision for exactly this query vector.
    Vector([i16; DIMS]),
    /// 400.
    Rejected,
    /// The damage makes the outcome depend on details this generator does not model (garbage
    /// text that may happen to be a valid timestamp, ...): only the generic invariants hold.
    Either,
}

fn clamp01(v: f64) -> f64 {
    // Written as the labeller's comparisons; `ratio` keeps NaN away.
    v.clamp(0.0, 1.0)
}

/// num / den, with the one rule the spec leaves open: 0 / 0 is 0.
fn ratio(num: f64, den: f64) -> f64 {
    let r = num / den;
    if r.is_nan() {
        0.0
    } else {
        r
    }
}

/// C `round(v * 10000)`: half away from zero, which is what `f64::round` does.
fn fixed(v: f64) -> i16 {
    (v * 10_000.0).round() as i16
}

fn mcc_risk(mcc: &str) -> f64 {
    match mcc {
        "5411" => 0.15,
        "5812" => 0.30,
        "5912" => 0.20,
        "5944" => 0.45,
        "7801" => 0.80,
        "7802" => 0.75,
        "7995" => 0.85,
        "4511" => 0.35,
        "5311" => 0.25,
        "5999" => 0.50,
        _ => 0.5,
    }
}

impl GenPayload {
    /// The JSON body and the answer it must get.
    pub fn render(&self) -> (Vec<u8>, Expect) {
        let raw = |s: String| Node::Raw(s);
        let last_node = match &self.last {
            Last::Null => Some(raw("null".into())),
            Last::Missing => None,
            Last::Some { timestamp, km } => Some(Node::Obj(vec![
                ("timestamp".into(), raw(ts_token(timestamp))),
                ("km_from_current".into(), raw(km.render())),
            ])),
        };
        let mut root = vec![];
        if let Some(id) = &self.id {
            root.push(("id".to_string(), raw(id.render())));
        }
        root.push((
            "transaction".into(),
            Node::Obj(vec![
                ("amount".into(), raw(self.amount.render())),
                ("installments".into(), raw(self.installments.render())),
                ("requested_at".into(), raw(ts_token(&self.requested_at))),
            ]),
        ));
        root.push((
            "customer".into(),
            Node::Obj(vec![
                ("avg_amount".into(), raw(self.avg_amount.render())),
                ("tx_count_24h".into(), raw(self.tx_count_24h.render())),
                (
                    "known_merchants".into(),
                    Node::Arr(
                        self.known_merchants
                            .iter()
                            .map(|t| raw(t.render()))
                            .collect(),
                    ),
                ),
            ]),
        ));
        root.push((
            "merchant".into(),
            Node::Obj(vec![
                ("id".into(), raw(self.merchant_id.render())),
                ("mcc".into(), raw(self.mcc.render())),
                ("avg_amount".into(), raw(self.merchant_avg_amount.render())),
            ]),
        ));
        root.push((
            "terminal".into(),
            Node::Obj(vec![
                ("is_online".into(), raw(self.is_online.to_string())),
                ("card_present".into(), raw(self.card_present.to_string())),
                ("km_from_home".into(), raw(self.km_from_home.render())),
            ]),
        ));
        if let Some(n) = last_node {
            root.push(("last_transaction".into(), n));
        }
        if let Some((kind, text)) = &self.extra {
            let v = match kind % 4 {
                0 => serde_json::to_string(text).unwrap(),
                1 => format!("[1,{},null]", serde_json::to_string(text).unwrap()),
                2 => format!(
                    r#"{{"amount":"x","nested":{{"a":[{{}}]}},"s":{}}}"#,
                    serde_json::to_string(text).unwrap()
                ),
                _ => "-1e999999".into(),
            };
            // serde_json skips an ignored field's number by syntax only, so even an
            // out-of-range one there is accepted (as for any unknown field).
            root.push(("extra".into(), raw(v)));
        }
        let mut tree = Node::Obj(root);
        if self.reverse {
            reverse_all(&mut tree);
        }

        // Field damage can be undone by later damage (dropping `last_transaction` after
        // breaking its timestamp), so: body-level damage always rejects; otherwise any damage
        // whose effect is not modelled makes the outcome open; otherwise any damage to a
        // required field rejects.
        let (mut body_level, mut rejects, mut open) = (false, false, false);
        let mut damaged: Vec<&str> = vec![];
        let mut landed: Vec<&str> = vec![];
        let mut truncate = None;
        let mut trailing = false;
        for d in &self.damage {
            let field = |i: &u8| FIELDS[*i as usize % FIELDS.len()];
            let effect = match d {
                Damage::Drop(i) => {
                    let (path, optional) = field(i);
                    // Dropping an array element leaves a valid (different) list.
                    let required = !optional && !path.ends_with(".0");
                    apply(&mut tree, path, |m, k| {
                        m.remove(k);
                    })
                    .then_some((path, required))
                }
                Damage::Null(i) => {
                    let (path, optional) = field(i);
                    apply(&mut tree, path, |m, k| m[k].1 = Node::Raw("null".into()))
                        .then_some((path, !optional))
                }
                Damage::WrongType(i) => {
                    let (path, _) = field(i);
                    // `extra` is ignored, so no type is wrong for it.
                    apply(&mut tree, path, |m, k| m[k].1 = Node::Raw("[{}]".into()))
                        .then_some((path, path != "extra"))
                }
                Damage::Duplicate(i) => {
                    let (path, _) = field(i);
                    // serde rejects a repeated known field; a repeated unknown field or array
                    // element is accepted.
                    apply(&mut tree, path, |m, k| {
                        let copy = m[k].clone();
                        m.insert(k, copy)
                    })
                    .then_some((path, path != "extra" && !path.ends_with(".0")))
                }
                Damage::TrailingGarbage => {
                    trailing = true;
                    body_level = true;
                    None
                }
                Damage::Truncate(n) => {
                    truncate = Some(*n as usize);
                    body_level = true;
                    None
                }
            };
            // Damage to the same field twice, or to a field and one inside it, can cancel out
            // (a duplicate, then one copy dropped): not modelled.
            if let Some((path, _)) = effect {
                let overlaps = |q: &str| {
                    q == path
                        || q.strip_prefix(path).is_some_and(|r| r.starts_with('.'))
                        || path.strip_prefix(q).is_some_and(|r| r.starts_with('.'))
                };
                if landed.iter().any(|q| overlaps(q)) {
                    open = true;
                }
                landed.push(path);
            }
            match effect {
                Some((path, true)) => {
                    rejects = true;
                    damaged.push(path);
                }
                // The decision never reads `id`: dropping or nulling it changes nothing, unless
                // it removes earlier damage to it.
                Some(("id", false)) if !damaged.contains(&"id") => {}
                Some((_, false)) => open = true,
                None => {}
            }
        }
        let expect = if body_level || (rejects && !open) {
            Expect::Rejected
        } else if open {
            Expect::Either
        } else {
            self.expect_undamaged()
        };
        let mut out = String::new();
        tree.write(&mut out, self.spaced);
        let mut bytes = out.into_bytes();
        if let Some(n) = truncate {
            // Dropping at least the closing brace always leaves invalid JSON.
            bytes.truncate(n % bytes.len());
        }
        if trailing {
            bytes.extend_from_slice(b" x");
        }
        (bytes, expect)
    }

    /// The answer for the request without damage, from SPEC.md's table.
    fn expect_undamaged(&self) -> Expect {
        let num = |n: &Num| number_value(&n.render());
        let mut invalid = false;
        let mut unsure = false;
        let mut get = |n: &Num| {
            num(n).unwrap_or_else(|| {
                invalid = true;
                0.0
            })
        };
        let amount = get(&self.amount);
        let installments = get(&self.installments);
        let avg = get(&self.avg_amount);
        let tx = get(&self.tx_count_24h);
        let m_avg = get(&self.merchant_avg_amount);
        let km_home = get(&self.km_from_home);
        let last_km = match &self.last {
            Last::Some { km, .. } => Some(get(km)),
            _ => None,
        };
        let mut instant = |t: &Ts| -> Option<Instant> {
            if !t.is_string() {
                invalid = true;
                return None;
            }
            let i = t.instant();
            if i.is_none() {
                if t.garbage.is_some() {
                    unsure = true;
                } else {
                    invalid = true;
                }
            }
            i
        };
        let requested = instant(&self.requested_at);
        let last_at = match &self.last {
            Last::Some { timestamp, .. } => instant(timestamp),
            _ => None,
        };
        if invalid {
            return Expect::Rejected;
        }
        if unsure {
            return Expect::Either;
        }
        let req = requested.expect("valid");
        let mut v = [0f64; DIMS];
        v[0] = clamp01(ratio(amount, 10_000.0));
        v[1] = clamp01(ratio(installments, 12.0));
        v[2] = clamp01(ratio(ratio(amount, avg), 10.0));
        v[3] = req.hour as f64 / 23.0;
        v[4] = req.weekday as f64 / 6.0;
        match (last_at, last_km) {
            (Some(at), Some(km)) => {
                v[5] = clamp01(ratio((req.seconds - at.seconds) / 60.0, 1440.0));
                v[6] = clamp01(ratio(km, 1000.0));
            }
            _ => {
                v[5] = -1.0;
                v[6] = -1.0;
            }
        }
        v[7] = clamp01(ratio(km_home, 1000.0));
        v[8] = clamp01(ratio(tx, 20.0));
        v[9] = if self.is_online { 1.0 } else { 0.0 };
        v[10] = if self.card_present { 1.0 } else { 0.0 };
        let id = self.merchant_id.value();
        let known = self.known_merchants.iter().any(|k| k.value() == id);
        v[11] = if known { 0.0 } else { 1.0 };
        v[12] = mcc_risk(&self.mcc.value());
        v[13] = clamp01(ratio(m_avg, 10_000.0));
        Expect::Vector(v.map(fixed))
    }
}

fn ts_token(t: &Ts) -> String {
    let text = t.render();
    if t.is_string() {
        serde_json::to_string(&text).unwrap()
    } else {
        text
    }
}

fn reverse_all(n: &mut Node) {
    match n {
        Node::Obj(members) => {
            members.reverse();
            for (_, m) in members {
                reverse_all(m);
            }
        }
        Node::Arr(items) => items.iter_mut().for_each(reverse_all),
        Node::Raw(_) => {}
    }
}

/// Applies `f` to the member at `path` if it exists; array elements are turned into a one-
/// member view so the same damage applies. Returns whether anything was changed.
fn apply(tree: &mut Node, path: &str, f: impl FnOnce(&mut Vec<(String, Node)>, usize)) -> bool {
    if let Some(list) = path.strip_suffix(".0") {
        // The first element of an array: damage it in place through a temporary member list.
        let Some((members, i)) = tree.find(list) else {
            return false;
        };
        let Node::Arr(items) = &mut members[i].1 else {
            return false;
        };
        if items.is_empty() {
            return false;
        }
        let mut view = vec![(String::new(), items.remove(0))];
        f(&mut view, 0);
        for (j, (_, n)) in view.into_iter().enumerate() {
            items.insert(j, n);
        }
        return true;
    }
    match tree.find(path) {
        Some((members, i)) => {
            f(members, i);
            true
        }
        None => false,
    }
}
