//! The one generator of command-line flags: every declared option
//! (`normlab::settings::Field`: `train`'s run and model options, the
//! experiment flags of `exp` and `demo`) becomes clap arguments here, with
//! one rule for switches (`--key` sets true; `--no-key` sets false, for an
//! option that is on by default or can be either; the later of the two
//! wins), and comes back as the key and its text, which the option's own
//! declaration then parses and checks (`settings::flag_value` for run
//! options, `ExpFlag::set` for experiment flags).

use clap::{Arg, ArgAction, ArgMatches, Command};
use normlab::settings::{Field, Flag};

/// One option as given on the command line.
#[derive(Clone, Debug)]
pub struct Given {
    /// The option's key.
    pub key: &'static str,
    /// The flag as written (`--d-model`, `--no-residual`).
    pub written: String,
    /// Its value (`true`/`false` for a switch).
    pub text: String,
}

/// The clap id of a switch's `--no-` form.
fn no_id(f: &Field) -> String {
    format!("no-{}", f.flag_name())
}

/// Add the flags of `fields` to `cmd`.
pub fn augment(mut cmd: Command, fields: impl IntoIterator<Item = Field>) -> Command {
    for f in fields {
        let (name, help) = (f.flag_name(), f.help());
        let upper = name.to_uppercase().replace('-', "_");
        let value = |value_name: String| {
            Arg::new(f.key)
                .long(name.clone())
                .action(ArgAction::Set)
                .value_name(value_name)
                .allow_hyphen_values(true)
        };
        let switch = |id: String, long: String| Arg::new(id).long(long).action(ArgAction::SetTrue);
        cmd = match f.flag {
            Flag::Hidden => cmd,
            Flag::Num | Flag::NumOr(_) => cmd.arg(value("N".into()).help(help)),
            Flag::Choice(_) => cmd.arg(value("NAME".into()).help(help)),
            Flag::Text => cmd.arg(value(upper).help(help)),
            Flag::List => cmd.arg(
                value(format!("{upper},.."))
                    .help(format!("{}; comma-separated", help.trim_end_matches('.'))),
            ),
            Flag::On => cmd.arg(switch(f.key.to_string(), name.clone()).help(help)),
            Flag::Off => {
                cmd.arg(switch(no_id(&f), no_id(&f)).help(format!("Off (on by default): {help}")))
            }
            Flag::OnOff => cmd
                .arg(
                    switch(f.key.to_string(), name.clone())
                        .overrides_with(no_id(&f))
                        .help(help),
                )
                .arg(
                    switch(no_id(&f), no_id(&f))
                        .overrides_with(f.key)
                        .help(format!("The opposite of --{name}.")),
                ),
        };
    }
    cmd
}

/// The options of `fields` given in `m`, in declaration order.
pub fn given(m: &ArgMatches, fields: impl IntoIterator<Item = Field>) -> Vec<Given> {
    let mut out = Vec::new();
    for f in fields {
        let name = f.flag_name();
        let on = |id: &str| m.try_get_one::<bool>(id).ok().flatten() == Some(&true);
        match f.flag {
            Flag::Hidden => {}
            Flag::Num | Flag::NumOr(_) | Flag::Text | Flag::Choice(_) | Flag::List => {
                if let Some(v) = m.get_one::<String>(f.key) {
                    out.push(Given {
                        key: f.key,
                        written: format!("--{name}"),
                        text: v.clone(),
                    });
                }
            }
            Flag::On | Flag::Off | Flag::OnOff => {
                // overrides_with leaves only the later of the two set.
                if on(&no_id(&f)) {
                    out.push(Given {
                        key: f.key,
                        written: format!("--no-{name}"),
                        text: "false".into(),
                    });
                } else if on(f.key) {
                    out.push(Given {
                        key: f.key,
                        written: format!("--{name}"),
                        text: "true".into(),
                    });
                }
            }
        }
    }
    out
}
