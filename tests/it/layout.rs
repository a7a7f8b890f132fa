//! The shape the contract promises (docs/contract.md §5): imports between the
//! parts of `src/` run one way, with no loop, and connectors know nothing of
//! the store, the ledger, leases or the run loop. Read from the source text,
//! so a change that breaks the shape fails here, not in review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level part of `src/` and the parts it names (`crate::<part>`).
fn imports() -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&src)?.to_string_lossy().to_string();
            let part = relative
                .split('/')
                .next()
                .unwrap_or_default()
                .trim_end_matches(".rs")
                .to_string();
            if part == "main" || part == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let named = graph.entry(part.clone()).or_default();
            for (i, _) in text.match_indices("crate::") {
                let rest = &text[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != part {
                    named.insert(name);
                }
            }
        }
    }
    Ok(graph)
}

/// Fails naming the first loop of `graph` (a part that reaches itself).
fn ensure_no_loop(graph: &BTreeMap<String, BTreeSet<String>>) -> anyhow::Result<()> {
    for start in graph.keys() {
        // Everything reachable from `start`; reaching `start` again is a loop.
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(&String, Vec<&String>)> =
            graph[start].iter().map(|n| (n, vec![start, n])).collect();
        while let Some((part, path)) = stack.pop() {
            anyhow::ensure!(
                part != start,
                "import loop: {}",
                path.iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(" -> ")
            );
            if !seen.insert(part) {
                continue;
            }
            for next in graph.get(part).into_iter().flatten() {
                let mut longer = path.clone();
                longer.push(next);
                stack.push((next, longer));
            }
        }
    }
    Ok(())
}

#[test]
fn imports_between_parts_run_one_way_with_no_loop() -> anyhow::Result<()> {
    ensure_no_loop(&imports()?)
}

/// The run loop's files (`src/worker/`) name each other one way too: the
/// guarantee path (`run`) on top, what it is made of below it, and the
/// run's context (`run_env`) and page types (`page`) at the bottom.
#[test]
fn the_worker_files_import_each_other_with_no_loop() -> anyhow::Result<()> {
    let worker = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker");
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&worker)? {
        let name = entry?.file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".rs")
            && stem != "mod"
        {
            files.insert(stem.to_string());
        }
    }
    anyhow::ensure!(files.contains("run") && files.contains("run_env"));
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(worker.join(format!("{file}.rs")))?;
        let named = graph.entry(file.clone()).or_default();
        for (i, _) in text.match_indices("super::") {
            let name: String = text[i + "super::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if files.contains(&name) && &name != file {
                named.insert(name);
            }
        }
    }
    ensure_no_loop(&graph)
}

#[test]
fn connectors_know_nothing_of_the_store_leases_config_or_the_run_loop() -> anyhow::Result<()> {
    let graph = imports()?;
    let above = [
        "store",
        "lease",
        "config",
        "worker",
        "daemon",
        "sweeper",
        "scheduler",
        "http",
        "views",
        "commands",
        "alerts",
    ];
    for connector in ["source", "destination", "outbound", "connector_config"] {
        let named = graph.get(connector).cloned().unwrap_or_default();
        let wrong: Vec<_> = named
            .iter()
            .filter(|n| above.contains(&n.as_str()))
            .collect();
        anyhow::ensure!(wrong.is_empty(), "{connector}/ imports {wrong:?}");
    }
    // Sources and destinations are peers: neither imports the other.
    for (a, b) in [("source", "destination"), ("destination", "source")] {
        anyhow::ensure!(
            !graph.get(a).is_some_and(|n| n.contains(b)),
            "{a}/ imports {b}/"
        );
    }
    Ok(())
}

/// A connector keeps its own knowledge: the commands and `ops` ask the
/// source and destination configs (`check_mapping`, `check_key`,
/// `erasure`, `answer_words`, …) and never name a connector kind, in code,
/// words or comments. A new connector touches its own folder and the
/// closed enums' dispatch, not the commands.
#[test]
fn commands_and_ops_name_no_connector_kind() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The kinds as sync files write them, and the Rust names of their
    // variants, types and modules.
    let mut kinds: Vec<String> = Vec::new();
    for (dir, suffix) in [("src/source", "Source"), ("src/destination", "Destination")] {
        for entry in std::fs::read_dir(root.join(dir))? {
            let path = entry?.path();
            if path.is_dir() {
                let kind = path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .to_string();
                let mut type_name = kind[..1].to_uppercase() + &kind[1..];
                kinds.push(format!("{}::{kind}", &dir[4..]));
                kinds.push(format!("Config::{type_name}("));
                type_name.push_str(suffix);
                kinds.push(type_name);
                // Words of the outside services: a kind's name in prose.
                if !["postgres", "http"].contains(&kind.as_str()) {
                    kinds.push(kind);
                }
            }
        }
    }
    anyhow::ensure!(
        kinds.iter().any(|k| k == "brevo") && kinds.iter().any(|k| k == "shopify"),
        "the connector folders were not found: {kinds:?}"
    );
    let mut found = Vec::new();
    for dir in ["src/commands", "src/ops"] {
        for file in rust_files(&root.join(dir))? {
            let text = std::fs::read_to_string(&file)?;
            for (number, line) in text.lines().enumerate() {
                let lower = line.to_lowercase();
                for kind in &kinds {
                    let named = match kind.chars().next().is_some_and(char::is_uppercase)
                        || kind.contains("::")
                    {
                        true => line.contains(kind.as_str()),
                        false => lower.contains(kind.as_str()),
                    };
                    if named {
                        found.push(format!(
                            "{}:{}: names {kind}",
                            file.strip_prefix(root)?.display(),
                            number + 1
                        ));
                    }
                }
            }
        }
    }
    anyhow::ensure!(
        found.is_empty(),
        "commands/ and ops/ name connector kinds (ask the connector's config instead):\n{}",
        found.join("\n")
    );
    Ok(())
}

/// The HTTP handlers reach syncs and runs only through `ops` (the one door
/// that takes the caller's scope): no store query or view load of their own,
/// and no state but the door (so one without a scope does not compile). The
/// CLI's sync and run commands go through the same door.
#[test]
fn http_handlers_and_cli_reach_syncs_and_runs_only_through_ops() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let everywhere = [
        "store::syncs",
        "store::runs",
        "store::cursors",
        "syncs::",
        "cursors::",
        "runs::list_runs",
        "runs::get_run",
        "runs::enqueue_run",
        "SyncView::load",
        "RunView::load",
        "OverviewView::load",
    ];
    let files = [
        (
            "src/http/api.rs",
            &["HttpState", "PgPool", "store::{", "runs::"][..],
        ),
        (
            "src/http/pages.rs",
            &["HttpState", "PgPool", "store::{", "runs::"][..],
        ),
        ("src/commands/sync.rs", &[][..]),
        ("src/commands/runs.rs", &["PgPool"][..]),
        ("src/commands/plan.rs", &["PgPool"][..]),
    ];
    // A foreground run is the run path itself (like a worker's claim); it
    // only queues nothing of its own.
    let run_path = [("src/commands/run_once.rs", &["runs::enqueue_run"][..])];
    let checks = files
        .iter()
        .map(|(file, own)| {
            (
                *file,
                everywhere.iter().chain(own.iter()).collect::<Vec<_>>(),
            )
        })
        .chain(
            run_path
                .iter()
                .map(|(file, own)| (*file, own.iter().collect())),
        );
    for (file, forbidden) in checks {
        let text = std::fs::read_to_string(root.join(file))?;
        for forbidden in forbidden {
            anyhow::ensure!(
                !text.contains(forbidden),
                "{file} uses {forbidden}: go through crate::ops::Door with the caller's Scope"
            );
        }
    }
    // No file of http/ holds the store: the access layer's tokens, readiness
    // and the metrics' sync health go through the door too, and what a
    // scope may see or do is decided there, once.
    for file in rust_files(&root.join("src/http"))? {
        let text = std::fs::read_to_string(&file)?;
        for forbidden in ["crate::store", "store::", "HttpState { store", "pub store:"] {
            anyhow::ensure!(
                !text.contains(forbidden),
                "{} uses {forbidden}: http/ reaches the store only through crate::ops",
                file.strip_prefix(root)?.display()
            );
        }
    }
    Ok(())
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    Ok(found)
}

/// Comments and documents name files that exist: a document under docs/, a
/// migration, a script or a deploy file is there; a section cited as
/// `docs/contract.md §1` or `§1.4` is one of its numbered sections and
/// items; a `#anchor` after a document is one of its headings;
/// and nothing cites the design documents kept outside the repository
/// (`docs/contract.md` is the repository's copy). Read in `src/`, `tests/`,
/// `benches/` (comments), `docs/` and the README (every line).
#[test]
fn comments_and_docs_cite_only_files_and_sections_that_exist() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sections = contract_sections(&std::fs::read_to_string(root.join("docs/contract.md"))?);
    let mut texts: Vec<(std::path::PathBuf, bool)> = Vec::new();
    for dir in ["src", "tests", "benches"] {
        texts.extend(rust_files(&root.join(dir))?.into_iter().map(|p| (p, true)));
    }
    for entry in std::fs::read_dir(root.join("docs"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            texts.push((path, false));
        }
    }
    texts.push((root.join("README.md"), false));
    let mut missing = Vec::new();
    for (path, comments_only) in texts {
        let text = std::fs::read_to_string(&path)?;
        for (n, line) in text.lines().enumerate() {
            let cited_text = match line.trim_start().strip_prefix("//") {
                Some(comment) => comment,
                None if comments_only => continue,
                None => line,
            };
            let at = format!("{}:{}", path.strip_prefix(root)?.display(), n + 1);
            if cited_text.contains("DESIGN") || cited_text.contains("STYLE.md") {
                missing.push(format!("{at}: cites a document outside the repository"));
            }
            let words: Vec<&str> = cited_text
                .split(|c: char| c.is_whitespace() || "`()[],;:\"'".contains(c))
                .collect();
            for (w, word) in words.iter().enumerate() {
                let cited = word.trim_end_matches('.');
                let is_path = [
                    "docs/",
                    "migrations/",
                    "scripts/",
                    "deploy/",
                    "config/",
                    "benches/",
                    "src/",
                ]
                .iter()
                .any(|p| cited.starts_with(p))
                    && cited.contains('.')
                    && !cited.contains('*')
                    && !cited.contains('{');
                let (file, anchor) = cited.split_once('#').unwrap_or((cited, ""));
                if is_path && !root.join(file).exists() {
                    missing.push(format!("{at}: {file} does not exist"));
                } else if is_path
                    && !anchor.is_empty()
                    && !headings(&std::fs::read_to_string(root.join(file))?).contains(anchor)
                {
                    missing.push(format!("{at}: {file} has no heading #{anchor}"));
                }
                let section = words[w + 1..]
                    .iter()
                    .find(|w| !w.is_empty())
                    .and_then(|w| w.strip_prefix('§'))
                    .map(|s| s.trim_end_matches('.'));
                if cited.ends_with("contract.md")
                    && let Some(section) = section
                    && !sections.contains(section)
                {
                    missing.push(format!("{at}: docs/contract.md has no §{section}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    Ok(())
}

/// The anchors of a Markdown document's headings, as GitHub makes them:
/// lower case, spaces as `-`, punctuation but `-` and `_` dropped.
fn headings(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| {
            heading
                .trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The sections (`## N.`) of the contract and their numbered items (`N.M`).
fn contract_sections(text: &str) -> BTreeSet<String> {
    let mut sections = BTreeSet::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            current = heading
                .split('.')
                .next()
                .filter(|n| n.parse::<u32>().is_ok());
            if let Some(n) = current {
                sections.insert(n.to_string());
            }
        } else if let Some(n) = current
            && let Some((item, _)) = line.split_once(". ")
            && item.parse::<u32>().is_ok()
        {
            sections.insert(format!("{n}.{item}"));
        }
    }
    sections
}

/// `docs/design.md`'s module map names every part of `src/` (each folder and
/// each file at its top), so a new part cannot go unmapped.
#[test]
fn the_design_module_map_names_every_part_of_src() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let design = std::fs::read_to_string(root.join("docs/design.md"))?;
    let map = design
        .split("```")
        .find(|block| block.contains("src/main.rs"))
        .ok_or_else(|| anyhow::anyhow!("docs/design.md has no module map"))?;
    let mut unmapped = Vec::new();
    for entry in std::fs::read_dir(root.join("src"))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        let part = if entry.path().is_dir() {
            format!("src/{name}/")
        } else {
            format!("src/{name}")
        };
        if !map.contains(&part) {
            unmapped.push(part);
        }
    }
    unmapped.sort();
    assert!(
        unmapped.is_empty(),
        "docs/design.md's module map does not name: {}",
        unmapped.join(", ")
    );
    Ok(())
}
