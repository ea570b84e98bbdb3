//! Whether shaders keep wgpu's runtime bounds checks: the one switch between what debug
//! builds run and what release builds ship, chosen explicitly so tests can run both.

use crate::{Error, Result};

/// How a device compiles its shader modules.
///
/// Release builds ship `Unchecked` shaders (bounds checks cost 8.6x on a tiled matmul on an
/// H200, shared/gpu-facts.md) after every shape was validated on the host; `Checked` keeps
/// wgpu's runtime bounds checks, so an out-of-range index reads zero instead of garbage.
/// Tests open one device of each kind, so what ships is what is tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShaderChecks {
    /// `create_shader_module`: wgpu's bounds checks stay in every shader.
    Checked,
    /// `create_shader_module_trusted(.., ShaderRuntimeChecks::unchecked())`: what release ships.
    Unchecked,
}

impl ShaderChecks {
    /// The environment variable that overrides the build default.
    pub const ENV: &'static str = "CONVOY_CHECKED";

    /// The build default: `Checked` in debug builds, `Unchecked` in release builds, unless
    /// `CONVOY_CHECKED` says otherwise (`1`/`true` forces checks, `0`/`false` removes them,
    /// case-insensitive; an empty value means the default). Any other value is an error,
    /// so a typo cannot silently pick the variant the user did not want.
    pub fn from_env() -> Result<ShaderChecks> {
        let value = std::env::var_os(Self::ENV).map(|v| v.to_string_lossy().into_owned());
        Self::parse(value.as_deref(), Self::build_default())
    }

    /// `Checked` in debug builds, `Unchecked` in release builds.
    pub fn build_default() -> ShaderChecks {
        if cfg!(debug_assertions) { ShaderChecks::Checked } else { ShaderChecks::Unchecked }
    }

    /// Reads a `CONVOY_CHECKED` value; `None` or an empty value keeps `default`.
    pub fn parse(value: Option<&str>, default: ShaderChecks) -> Result<ShaderChecks> {
        let Some(raw) = value else { return Ok(default) };
        match raw.trim().to_ascii_lowercase().as_str() {
            "" => Ok(default),
            "1" | "true" => Ok(ShaderChecks::Checked),
            "0" | "false" => Ok(ShaderChecks::Unchecked),
            _ => Err(Error::Config(format!("{}=`{raw}`: expected 1, true, 0 or false", Self::ENV))),
        }
    }

    /// True for `Checked`.
    pub fn is_checked(self) -> bool {
        self == ShaderChecks::Checked
    }
}

#[cfg(test)]
mod tests {
    use super::ShaderChecks::{self, Checked, Unchecked};

    #[test]
    fn parse_forces_either_way_and_refuses_the_rest() {
        for default in [Checked, Unchecked] {
            assert_eq!(ShaderChecks::parse(None, default).unwrap(), default);
            assert_eq!(ShaderChecks::parse(Some(""), default).unwrap(), default);
            for on in ["1", "true", "TRUE", " True "] {
                assert_eq!(ShaderChecks::parse(Some(on), default).unwrap(), Checked, "{on:?}");
            }
            for off in ["0", "false", "False"] {
                assert_eq!(ShaderChecks::parse(Some(off), default).unwrap(), Unchecked, "{off:?}");
            }
            for bad in ["yes", "2", "off"] {
                let e = ShaderChecks::parse(Some(bad), default).unwrap_err().to_string();
                assert!(e.contains("CONVOY_CHECKED") && e.contains(bad), "{e}");
            }
        }
    }
}
