//! Shell completion of values the command line cannot know: sync ids, read
//! from the store the config names (`COMPLETE=bash syncward`, the packaged
//! completion scripts). Apart from `commands` so the command line's types
//! can name it without a loop.

use crate::config::{ConfigSource, Settings};
use crate::store;

/// The sync ids starting with what is typed, for the shells' completion
/// (`COMPLETE=bash syncward`): read from the store the config names, within
/// two seconds; none when it cannot be read (completion never errs aloud).
pub fn sync_id_candidates(typed: &std::ffi::OsStr) -> Vec<clap_complete::CompletionCandidate> {
    let typed = typed.to_string_lossy();
    let Ok(settings) = Settings::load(&ConfigSource::resolve(None)) else {
        return Vec::new();
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let ids = runtime.block_on(async {
        let read = async {
            let pool = store::connect(&settings.database).await.ok()?;
            store::syncs::all_definitions(&pool).await.ok()
        };
        tokio::time::timeout(std::time::Duration::from_secs(2), read)
            .await
            .ok()
            .flatten()
    });
    ids.unwrap_or_default()
        .into_iter()
        .map(|s| s.id)
        .filter(|id| id.starts_with(typed.as_ref()))
        .map(clap_complete::CompletionCandidate::new)
        .collect()
}
