//! The docs, records, experiments and comments describe the current state and what was
//! measured: none names an issue, a session or who asked (dated batches say what they measured).

use xtask::util::root;

#[test]
fn no_record_doc_or_comment_names_an_issue_or_a_session() {
    let files = duct::cmd!("git", "ls-files", "*.md", "*.rs", "*.yml", "*.yaml", "*.cfg", "*.js")
        .dir(root())
        .read()
        .expect("git ls-files");
    let named = |line: &str| {
        let l = line.to_lowercase();
        let issue_number = l.match_indices("issue").any(|(at, _)| {
            let rest = l[at + 5..].trim_start_matches([' ', '#']);
            rest.starts_with(|c: char| c.is_ascii_digit())
        });
        issue_number
            || ["the issue's", "the issue asked", "the issue measured", "the issue said"]
                .iter()
                .any(|p| l.contains(p))
            || l.match_indices("session ")
                .any(|(at, _)| l[at + 8..].starts_with(|c: char| c.is_ascii_digit()))
            || l.contains("other engineers")
            || l.contains("another engineer")
    };
    let mut found = Vec::new();
    for file in files.lines().filter(|f| !f.ends_with("xtask/tests/docs.rs")) {
        let Ok(text) = std::fs::read_to_string(root().join(file)) else { continue };
        for (n, line) in text.lines().enumerate().filter(|(_, l)| named(l)) {
            found.push(format!("{file}:{}: {line}", n + 1));
        }
    }
    assert!(found.is_empty(), "describe the current state, not who asked:\n{}", found.join("\n"));
}
