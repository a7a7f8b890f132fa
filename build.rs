// sqlx's `migrate!` embeds migrations at compile time but does not notice a new
// file on its own.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
