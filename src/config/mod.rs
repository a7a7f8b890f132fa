//! Configuration: the daemon's settings, sync definition files, and the
//! validated newtypes both are made of.

mod bad_input;
mod definition_diff;
mod env_file;
mod ids;
mod redis_address;
mod schedule;
pub mod secrets;
mod settings;
pub(crate) mod shown;
mod sync_file;
mod url_secrets;

pub use bad_input::{BadInput, BadInputs};
pub use definition_diff::{FieldChange, delivery_meaning, field_changes};
pub use env_file::{DEFAULT_ENV_FILE, ENV_FILE_LOADED, variables_to_add};
pub use ids::{SyncId, WorkspaceId};
pub use redis_address::{RedisAddress, SENTINEL_PORT, SENTINEL_SCHEME, SentinelAddress};
pub use schedule::{CatchUp, Schedule, Timezone};
pub use settings::*;
pub use sync_file::{
    ConsentRule, MappingConfig, NotifyConfig, SyncDefinition, load_definitions, sync_files_in,
};
pub use url_secrets::{REDACTED, redact_url, redact_url_text};
