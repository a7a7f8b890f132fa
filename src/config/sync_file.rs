//! Sync definition files (docs/contract.md §3): parsed strictly from TOML into a
//! `SyncDefinition`, checked by a pure `validate`, and only then checked against
//! the environment for the secrets they name.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::bad_input::{BadInput, BadInputs};
use super::ids::{SyncId, WorkspaceId};
use super::schedule::{CatchUp, Schedule, Timezone};
use super::secrets::SecretStore;
use super::url_secrets::hide_urls_in_message;
use crate::connector_config::{EnvVarName, FieldError};
use crate::destination::DestinationConfig;
use crate::source::SourceConfig;

/// One sync: where records come from, where they go, when, and how fields map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncDefinition {
    pub id: SyncId,
    pub workspace: WorkspaceId,
    pub schedule: Schedule,
    /// IANA time zone the schedule is read in (`Europe/Paris`); default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<Timezone>,
    /// A tick that fell while no daemon ran: `once` (default) enqueues one run
    /// when a daemon starts, however many were missed; `skip` waits for the
    /// next tick. A tick counts as missed when it is more than a minute late.
    #[serde(default, skip_serializing_if = "CatchUp::is_once")]
    pub catch_up: CatchUp,
    /// Consecutive failures that pause this sync; overrides `breaker.consecutive_failures`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_failures: Option<u32>,
    /// Silence that raises the dead-man alert for this sync; overrides
    /// `deadman.silence_window`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde::option"
    )]
    pub silence_window: Option<Duration>,
    pub source: SourceConfig,
    pub destination: DestinationConfig,
    pub mapping: MappingConfig,
    /// Where each finished run is announced (`run.succeeded`, `run.failed`,
    /// `run.cancelled`), for a job that must follow the sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<NotifyConfig>,
}

/// `[notify]`: one signed event per finished run (Standard Webhooks, as the
/// alerts and the webhook destination sign), delivered at least once by the
/// daemon's sweeper, retried with `retry.backoff_base`, never holding a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The receiver (reached through the outbound policy).
    pub url: url::Url,
    /// The workspace secret holding the signing key.
    pub secret_env: EnvVarName,
}

/// How a source record becomes a contact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MappingConfig {
    /// Source field holding the e-mail address; a record without it is rejected
    /// (`missing_email`).
    pub email: String,
    /// Destination attribute name → source field.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    /// Marketing consent: which source field holds the person's consent
    /// state, which of its values mean subscribed and which mean an explicit
    /// opt-out. Default none: every record is treated alike (added to the
    /// destination's lists). With a rule there are three states: a
    /// `subscribed` value joins the lists; an `unsubscribed` value is kept
    /// off them and, where the destination can, blocklisted for e-mail
    /// (Brevo: `emailBlacklisted`); anything else (not subscribed, pending,
    /// null, absent) goes on no list with its blocklist status left alone.
    /// For Shopify: `consent = { field = "defaultEmailAddress.marketingState",
    /// subscribed = ["SUBSCRIBED"] }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consent: Option<ConsentRule>,
    /// Attributes whose source field may go missing: a run stops as
    /// `mapped_field_vanished` when a field present in most records of the
    /// sync's last complete read is absent or null in most records of this
    /// one (a renamed or emptied column would otherwise stop updating its
    /// attribute without a word). Listed here, it goes on regardless.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_vanished: Vec<String>,
}

/// `[mapping] consent = { field, subscribed, unsubscribed }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsentRule {
    /// Source field (a dotted path may reach into nested objects) holding the
    /// consent state, e.g. Shopify's `defaultEmailAddress.marketingState`.
    pub field: String,
    /// The field's values (strings, compared exactly) that mean the person
    /// agreed, e.g. `["SUBSCRIBED"]`. At least one.
    pub subscribed: Vec<String>,
    /// The field's values that mean the person opted out (blocklisted).
    /// Default `["UNSUBSCRIBED"]` (Shopify's); `[]` blocklists no one.
    #[serde(default = "default_unsubscribed")]
    pub unsubscribed: Vec<String>,
}

fn default_unsubscribed() -> Vec<String> {
    vec!["UNSUBSCRIBED".into()]
}

impl SyncDefinition {
    /// Parses one file's text. `origin` names the file in errors.
    pub fn parse(origin: &str, text: &str) -> Result<Self, BadInput> {
        let deserializer =
            toml::Deserializer::parse(text).map_err(|e| BadInput::toml_syntax(origin, text, &e))?;
        let definition: SyncDefinition =
            serde_path_to_error::deserialize(deserializer).map_err(|e| {
                let mut key = e.path().to_string();
                let mut message = e.inner().message().to_string();
                if let Some((field, problem)) = diagnose_section(text, &key) {
                    // Errors inside a tagged table lose their field path in serde's
                    // buffering; re-read that table alone to name the field.
                    (key, message) = (
                        format!("{key}.{field}"),
                        problem.replace("unknown variant", "unknown value"),
                    );
                } else if message.starts_with("unknown variant")
                    && ["source", "destination", "source.kind", "destination.kind"]
                        .contains(&key.as_str())
                {
                    // An unknown `kind`: name the tag itself.
                    key = format!("{}.kind", key.trim_end_matches(".kind"));
                    message = message.replace("unknown variant", "unknown kind");
                }
                if key == "." {
                    key.clear();
                }
                BadInput::new(origin, key, hide_urls_in_message(&message))
            })?;
        definition
            .validate()
            .map_err(|e| BadInput::new(origin, e.field, e.why))?;
        Ok(definition)
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Self, BadInput> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput::new(&origin, "", format!("cannot read: {e}")))?;
        Self::parse(&origin, &text)
    }

    /// Pure checks of values that deserialize but cannot work together.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (field, var) in self.secret_names() {
            if var.is_the_daemons() {
                return Err(FieldError::new(
                    field,
                    format!(
                        "{var} is a name of the daemon's own (its settings and environment); \
                         a sync names only secrets of its workspace's secrets file"
                    ),
                ));
            }
        }
        if self.breaker_failures == Some(0) {
            return Err(FieldError::new(
                "breaker_failures".into(),
                "must be at least 1".into(),
            ));
        }
        if let Some(failures) = self.breaker_failures.filter(|f| *f > 1000) {
            return Err(FieldError::new(
                "breaker_failures".into(),
                format!("{failures} is more than the limit of 1000"),
            ));
        }
        if self
            .silence_window
            .is_some_and(|w| w < Duration::from_secs(60))
        {
            return Err(FieldError::new(
                "silence_window".into(),
                "must be at least 1m".into(),
            ));
        }
        // The same limit as `deadman.silence_window`.
        if let Some(window) = self
            .silence_window
            .filter(|w| *w > Duration::from_secs(31_557_600))
        {
            return Err(FieldError::new(
                "silence_window".into(),
                format!(
                    "{} is longer than the limit of 1year",
                    crate::words::duration_text(window)
                ),
            ));
        }
        self.source.validate()?;
        self.destination.validate()?;
        if let Some(notify) = &self.notify
            && !matches!(notify.url.scheme(), "http" | "https")
        {
            return Err(FieldError::new(
                "notify.url".into(),
                "must be an http or https URL".into(),
            ));
        }
        check_no_credentials_in_urls(self)?;
        if self.mapping.email.trim().is_empty() {
            return Err(FieldError::new(
                "mapping.email".into(),
                "must name the source field that holds the e-mail address".into(),
            ));
        }
        // A store's customers carry their own consent state: putting every
        // one of them on marketing lists would subscribe people who never
        // agreed.
        if let (SourceConfig::Shopify(_), DestinationConfig::Brevo(brevo)) =
            (&self.source, &self.destination)
            && !brevo.list_ids.is_empty()
            && self.mapping.consent.is_none()
        {
            return Err(FieldError::new(
                "mapping.consent".into(),
                "a Shopify source feeding Brevo lists needs a consent rule: add \
                 consent = { field = \"defaultEmailAddress.marketingState\", subscribed = [\"SUBSCRIBED\"] }"
                    .into(),
            ));
        }
        if let Some(unmapped) = self
            .mapping
            .allow_vanished
            .iter()
            .find(|a| !self.mapping.attributes.contains_key(*a))
        {
            let mapped: Vec<&str> = self.mapping.attributes.keys().map(String::as_str).collect();
            return Err(FieldError::new(
                "mapping.allow_vanished".into(),
                format!(
                    "\"{unmapped}\" is not a mapped attribute (mapped: {})",
                    if mapped.is_empty() {
                        "none".into()
                    } else {
                        mapped.join(", ")
                    }
                ),
            ));
        }
        if let Some(rule) = &self.mapping.consent {
            if rule.field.trim().is_empty() {
                return Err(FieldError::new(
                    "mapping.consent.field".into(),
                    "must name the source field that holds the consent state".into(),
                ));
            }
            if rule.subscribed.is_empty() || rule.subscribed.iter().any(|v| v.trim().is_empty()) {
                return Err(FieldError::new(
                    "mapping.consent.subscribed".into(),
                    "must list the values that mean consent, e.g. [\"SUBSCRIBED\"], none empty"
                        .into(),
                ));
            }
            if rule.unsubscribed.iter().any(|v| v.trim().is_empty()) {
                return Err(FieldError::new(
                    "mapping.consent.unsubscribed".into(),
                    "must not hold an empty value".into(),
                ));
            }
            if let Some(both) = rule
                .unsubscribed
                .iter()
                .find(|v| rule.subscribed.contains(v))
            {
                return Err(FieldError::new(
                    "mapping.consent.unsubscribed".into(),
                    format!("\"{both}\" is also in mapping.consent.subscribed"),
                ));
            }
        }
        if let Some((name, _)) = self
            .mapping
            .attributes
            .iter()
            .find(|(_, field)| field.trim().is_empty())
        {
            return Err(FieldError::new(
                format!("mapping.attributes.{name}"),
                "must name a source field".into(),
            ));
        }
        Ok(())
    }

    /// Every secret the definition names, with the field that names it.
    pub fn secret_names(&self) -> impl Iterator<Item = (String, &EnvVarName)> {
        let source = self
            .source
            .secret_env_vars()
            .into_iter()
            .map(|(f, v)| (format!("source.{f}"), v));
        let destination = self
            .destination
            .secret_env_vars()
            .into_iter()
            .map(|(f, v)| (format!("destination.{f}"), v));
        let notify = self
            .notify
            .iter()
            .map(|n| ("notify.secret_env".to_string(), &n.secret_env));
        source.chain(destination).chain(notify)
    }

    /// The first field the definition reads that `fields` (a source's
    /// columns) lacks, as `(the definition's key, what is wrong)`: the
    /// cursor column, the mapped e-mail, each attribute's and the consent
    /// rule's field (a dotted name may reach into a JSON column). An
    /// attribute listed in `mapping.allow_vanished` may name a field the
    /// query no longer has.
    pub fn field_not_in(&self, fields: &[String]) -> Option<(String, String)> {
        let has = |name: &str| {
            fields.iter().any(|f| f == name)
                || name
                    .split_once('.')
                    .is_some_and(|(first, _)| fields.iter().any(|f| f == first))
        };
        let columns = || fields.join(", ");
        let mut read: Vec<(String, &str)> = Vec::new();
        if let crate::source::SourceConfig::Postgres(c) = &self.source
            && !c.cursor_column.is_empty()
        {
            read.push(("source.cursor_column".into(), c.cursor_column.as_str()));
        }
        read.push(("mapping.email".into(), self.mapping.email.as_str()));
        for (name, field) in &self.mapping.attributes {
            if !self.mapping.allow_vanished.contains(name) {
                read.push((format!("mapping.attributes.{name}"), field.as_str()));
            }
        }
        if let Some(consent) = &self.mapping.consent {
            read.push(("mapping.consent.field".into(), consent.field.as_str()));
        }
        read.into_iter()
            .find(|(_, field)| !has(field))
            .map(|(key, field)| {
                (
                    key,
                    format!(
                        "\"{field}\" is not among the query's columns ({})",
                        columns()
                    ),
                )
            })
    }

    /// What its failures' advice names: its id, its secrets by field and
    /// variable, and its workspace's secrets file (where `secrets` says).
    pub fn failure_context(
        &self,
        secrets: Option<&SecretStore>,
        paused: bool,
    ) -> crate::failure::FailureContext {
        let (mut source_secrets, mut destination_secrets) = (Vec::new(), Vec::new());
        for (field, var) in self.secret_names() {
            let named = (field.clone(), var.to_string());
            if field.starts_with("source.") {
                source_secrets.push(named);
            } else {
                destination_secrets.push(named);
            }
        }
        crate::failure::FailureContext {
            sync_id: self.id.to_string(),
            paused,
            source_secrets,
            destination_secrets,
            secrets_file: secrets.map(|s| s.file_of(&self.workspace).display().to_string()),
        }
    }

    /// Checks that every secret the definition names is in its workspace's
    /// secrets file here (`sync apply` runs this; the daemon reads the file
    /// again at run time).
    pub fn check_secrets(&self, origin: &str, secrets: &SecretStore) -> Result<(), BadInput> {
        let found = secrets.workspace(&self.workspace);
        for (field, var) in self.secret_names() {
            if let Err(why) = found.lookup(var) {
                return Err(BadInput::new(origin, field, why));
            }
        }
        // A webhook's signing key must be one a receiver can trust.
        if let crate::destination::DestinationConfig::Webhook(hook) = &self.destination
            && let Some(var) = &hook.secret_env
            && let Ok(secret) = found.lookup(var)
            && let Err(problem) =
                crate::outbound::WebhookSigner::from_secret(&secrecy::SecretString::from(secret))
        {
            return Err(BadInput::new(
                origin,
                "destination.secret_env",
                format!("{var} {problem}"),
            ));
        }
        Ok(())
    }
}

/// Loads every file of one `sync apply`, all or nothing: the first bad file, a
/// missing secret or a duplicate id stops the whole apply before anything is
/// written.
/// The sync files an apply names: each FILE as given, and every `*.toml`
/// under each DIR (subdirectories included), in path order. A directory
/// without any is refused: applying (or pruning to) an empty set by mistake
/// would archive every sync.
pub fn sync_files_in(paths: &[impl AsRef<Path>]) -> Result<Vec<std::path::PathBuf>, BadInput> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), BadInput> {
        let origin = dir.display().to_string();
        let entries = std::fs::read_dir(dir)
            .map_err(|e| BadInput::new(&origin, "", format!("cannot read the directory: {e}")))?;
        for entry in entries {
            let path = entry
                .map_err(|e| BadInput::new(&origin, "", format!("cannot read the directory: {e}")))?
                .path();
            if path.is_dir() {
                walk(&path, out)?;
            } else if path.extension().is_some_and(|e| e == "toml") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    for path in paths {
        let path = path.as_ref();
        if path.is_dir() {
            let mut found = Vec::new();
            walk(path, &mut found)?;
            if found.is_empty() {
                return Err(BadInput::new(
                    path.display().to_string(),
                    "",
                    "holds no *.toml sync files",
                ));
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(path.to_owned());
        }
    }
    Ok(files)
}

/// Reads and checks sync files for `sync apply`; without `secrets` the
/// variables they name need not be in the workspaces' secrets files (a plan
/// made in CI, where the secrets are not).
pub fn load_definitions(
    paths: &[impl AsRef<Path>],
    secrets: Option<&SecretStore>,
) -> Result<Vec<SyncDefinition>, BadInputs> {
    let mut seen: HashSet<SyncId> = HashSet::new();
    let mut definitions = Vec::with_capacity(paths.len());
    // Every file is read: one apply names every bad file, not the first.
    let mut bad = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let checked = SyncDefinition::load(path).and_then(|definition| {
            if let Some(secrets) = secrets {
                definition.check_secrets(&origin, secrets)?;
            }
            if !seen.insert(definition.id.clone()) {
                return Err(BadInput::new(
                    origin,
                    format!("id \"{}\"", definition.id),
                    "appears in more than one file of this apply",
                ));
            }
            Ok(definition)
        });
        match checked {
            Ok(definition) => definitions.push(definition),
            Err(e) => bad.push(e),
        }
    }
    if bad.is_empty() {
        Ok(definitions)
    } else {
        Err(BadInputs(bad))
    }
}

/// Refuses a definition any of whose URLs (`destination.base_url`, a
/// webhook's `url`, an http source's `url`, …) carries a credential: a sync
/// file is stored and shown (`sync show`, the pages), so its secrets come
/// from `*_env` settings only. Every string field that is a URL with a host is
/// checked, so a URL field added later is covered too.
fn check_no_credentials_in_urls(definition: &SyncDefinition) -> Result<(), FieldError> {
    fn walk(value: &serde_json::Value, key: &str) -> Result<(), FieldError> {
        match value {
            serde_json::Value::String(text) => {
                if let Ok(url) = url::Url::parse(text)
                    && url.has_host()
                    && let Some(problem) = super::url_secrets::credential_in_url(&url)
                {
                    return Err(FieldError::new(
                        key.to_string(),
                        format!(
                            "the URL {problem}; give secrets by environment variable \
                             (the connector's *_env settings), never inside a URL"
                        ),
                    ));
                }
                Ok(())
            }
            serde_json::Value::Object(map) => map.iter().try_for_each(|(name, inner)| {
                let key = if key.is_empty() {
                    name.clone()
                } else {
                    format!("{key}.{name}")
                };
                walk(inner, &key)
            }),
            serde_json::Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, inner)| walk(inner, &format!("{key}[{i}]"))),
            _ => Ok(()),
        }
    }
    // A definition always serializes (plain data, string keys); if it did not,
    // there would be no URL to check.
    match serde_json::to_value(definition) {
        Ok(value) => walk(&value, ""),
        Err(_) => Ok(()),
    }
}

/// Re-reads the `[source]` or `[destination]` table on its own to find which
/// field an error came from.
fn diagnose_section(text: &str, section: &str) -> Option<(String, String)> {
    let mut table: toml::Table = toml::from_str(text).ok()?;
    let toml::Value::Table(inner) = table.remove(section)? else {
        return None;
    };
    match section {
        "source" => SourceConfig::diagnose(inner),
        "destination" => DestinationConfig::diagnose(inner),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
id = "acme-contacts"
workspace = "acme"
schedule = "0 */15 * * * *"

[source]
kind = "postgres"
url_env = "ACME_WAREHOUSE_URL"
query = "SELECT id, email, first_name FROM contacts"
cursor_column = "id"
page_size = 500

[destination]
kind = "brevo"
api_key_env = "BREVO_API_KEY"
base_url = "https://api.brevo.com/v3"
mode = "bulk"
list_ids = [12]

[mapping]
email = "email"
attributes = { FIRSTNAME = "first_name" }
"#;

    #[test]
    fn the_design_example_parses_and_round_trips_through_json() {
        let d = SyncDefinition::parse("a.toml", GOOD).unwrap();
        assert_eq!(d.id.as_str(), "acme-contacts");
        let json = serde_json::to_value(&d).unwrap();
        let back: SyncDefinition = serde_json::from_value(json).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn a_colon_in_the_id_names_file_field_and_reason() {
        let text = GOOD.replace("\"acme-contacts\"", "\"acme:contacts\"");
        let err = SyncDefinition::parse("syncs/acme.toml", &text)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "syncs/acme.toml: id: \"acme:contacts\" contains a colon; only a-z, 0-9, '-' and '_' are allowed"
        );
    }

    #[test]
    fn an_unknown_kind_names_the_kind_field() {
        let text = GOOD.replace("kind = \"postgres\"", "kind = \"mysql\"");
        let err = SyncDefinition::parse("s.toml", &text).unwrap_err();
        assert_eq!(err.key, "source.kind");
        assert!(err.problem.contains("unknown kind `mysql`"), "{err}");
    }

    #[test]
    fn a_credential_inside_any_url_is_refused_naming_the_key() {
        for (url, problem) in [
            ("https://user:pw@api.brevo.com/v3", "password"),
            ("https://api.brevo.com/v3?api_key=X", "\"api_key\""),
        ] {
            let text = GOOD.replace("https://api.brevo.com/v3", url);
            let err = SyncDefinition::parse("s.toml", &text).unwrap_err();
            assert_eq!(err.key, "destination.base_url", "{err}");
            assert!(err.problem.contains(problem), "{err}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
    }

    #[test]
    fn a_shopify_source_feeding_brevo_lists_needs_a_consent_rule() {
        let shopify = GOOD.replace(
            "kind = \"postgres\"\nurl_env = \"ACME_WAREHOUSE_URL\"\nquery = \"SELECT id, email, first_name FROM contacts\"\ncursor_column = \"id\"\npage_size = 500",
            "kind = \"shopify\"\nshop = \"acme\"\napi_version = \"2025-07\"\naccess_token_env = \"SHOPIFY_TOKEN\"",
        );
        assert!(shopify.contains("shopify"));
        let err = SyncDefinition::parse("shop.toml", &shopify).unwrap_err();
        assert_eq!(err.key, "mapping.consent", "{err}");
        assert!(err.to_string().contains("marketingState"), "{err}");
        let with_rule = shopify.replace(
            "attributes = { FIRSTNAME = \"first_name\" }",
            "attributes = { FIRSTNAME = \"first_name\" }\nconsent = { field = \"defaultEmailAddress.marketingState\", subscribed = [\"SUBSCRIBED\"] }",
        );
        SyncDefinition::parse("shop.toml", &with_rule).unwrap();
    }

    #[test]
    fn a_consent_rule_parses_and_an_empty_one_is_refused_naming_the_key() {
        let with = |rule: &str| {
            GOOD.replace(
                "attributes = { FIRSTNAME = \"first_name\" }",
                &format!("attributes = {{ FIRSTNAME = \"first_name\" }}\nconsent = {rule}"),
            )
        };
        let d = SyncDefinition::parse(
            "s.toml",
            &with(r#"{ field = "marketing.state", subscribed = ["SUBSCRIBED"] }"#),
        )
        .unwrap();
        assert_eq!(
            d.mapping.consent,
            Some(ConsentRule {
                field: "marketing.state".into(),
                subscribed: vec!["SUBSCRIBED".into()],
                unsubscribed: vec!["UNSUBSCRIBED".into()],
            })
        );
        for (rule, key) in [
            (
                r#"{ field = "", subscribed = ["SUBSCRIBED"] }"#,
                "mapping.consent.field",
            ),
            (
                r#"{ field = "state", subscribed = [] }"#,
                "mapping.consent.subscribed",
            ),
            (
                r#"{ field = "state", subscribed = [" "] }"#,
                "mapping.consent.subscribed",
            ),
            (
                r#"{ field = "state", subscribed = ["YES"], unsubscribed = ["YES"] }"#,
                "mapping.consent.unsubscribed",
            ),
            (
                r#"{ field = "state", subscribed = ["YES"], unsubscribed = [""] }"#,
                "mapping.consent.unsubscribed",
            ),
        ] {
            let err = SyncDefinition::parse("s.toml", &with(rule)).unwrap_err();
            assert_eq!(err.key, key, "{err}");
        }
    }

    #[test]
    fn a_toml_syntax_error_names_the_line() {
        let err = SyncDefinition::parse("s.toml", "id = \"a\"\nworkspace = \n").unwrap_err();
        assert_eq!(err.key, "line 2, column 13");
    }

    proptest::proptest! {
        /// Any text is parsed or refused with a one-line error; never a panic.
        #[test]
        fn any_text_parses_or_is_refused_in_one_line(text in "\\PC{0,300}") {
            if let Err(e) = SyncDefinition::parse("fuzz.toml", &text) {
                proptest::prop_assert!(!e.to_string().contains('\n'), "{}", e);
            }
        }

        /// A good file with one line dropped or one byte changed: the same.
        #[test]
        fn a_damaged_good_file_parses_or_is_refused_in_one_line(
            line in proptest::prelude::any::<proptest::sample::Index>(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in 32u8..127,
            drop_line in proptest::bool::ANY,
        ) {
            let text = if drop_line {
                let lines: Vec<&str> = GOOD.lines().collect();
                let skip = line.index(lines.len());
                lines.iter().enumerate().filter(|(i, _)| *i != skip).map(|(_, l)| *l).collect::<Vec<_>>().join("\n")
            } else {
                let mut bytes = GOOD.as_bytes().to_vec();
                let i = at.index(bytes.len());
                bytes[i] = byte;
                String::from_utf8_lossy(&bytes).into_owned()
            };
            if let Err(e) = SyncDefinition::parse("fuzz.toml", &text) {
                proptest::prop_assert!(!e.to_string().contains('\n'), "{}", e);
            }
        }
    }
}
