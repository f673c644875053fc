//! config.toml edits and their exact reversal.

use crate::cli::install::edit::*;
use crate::cli::install::snippet::{v2_tables, Paths};

const V2_USER: &str = "version = 2\n\n# the user's CRI settings\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"example/pause:1\"\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n    runtime_type = \"io.containerd.runc.v2\"\n";

#[test]
fn appended_block_registers_and_reverts_byte_for_byte() {
    let tables = v2_tables(&Paths::default());
    for original in [V2_USER, V2_USER.trim_end(), "version = 2", ""] {
        let (edited, edit) = append_block(original, &tables).unwrap();
        assert!(edited.starts_with(original), "user text stays first");
        assert!(edited.contains(BEGIN) && edited.contains(END));
        let t: toml::Table = toml::from_str(&edited).unwrap();
        let cri = &t["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(
            cri["containerd"]["runtimes"]["rund"]["runtime_type"].as_str(),
            Some("io.containerd.rund.v2")
        );
        if original.contains("sandbox_image") {
            assert_eq!(cri["sandbox_image"].as_str(), Some("example/pause:1"));
            assert!(cri["containerd"]["runtimes"].get("runc").is_some());
        }
        assert_eq!(revert(&edited, &edit).unwrap(), original, "{edited}");
    }
}

#[test]
fn a_rund_table_already_defined_makes_the_append_invalid() {
    let tables = v2_tables(&Paths::default());
    let (once, _) = append_block(V2_USER, &tables).unwrap();
    let e = append_block(&once, &tables).unwrap_err();
    assert!(matches!(e, EditError::Invalid(_)), "{e:?}");
}

#[test]
fn imports_line_goes_before_the_first_table_and_reverts() {
    let cases = [
        "version = 2\n[plugins.x]\n  a = 1\n",
        "version = 3\nroot = \"/r\"\ndisabled_plugins = [\n  \"a\",\n  \"b\",\n]\n\n[grpc]\n  address = \"/s\"\n",
        "# only a comment\nversion = 3\n",
        "version = 3",
        "",
        "multi = \"\"\"\n[not.a.table]\n\"\"\"\nversion = 2\n[real]\n",
        "nested = [\n[1, 2],\n[3],\n]\n[t]\n",
    ];
    for original in cases {
        let (edited, edit) = add_import(original, "/etc/containerd/conf.d/*.toml")
            .unwrap_or_else(|e| panic!("{e}: {original:?}"));
        let t: toml::Table = toml::from_str(&edited).unwrap();
        assert_eq!(
            t["imports"].as_array().unwrap()[0].as_str(),
            Some("/etc/containerd/conf.d/*.toml"),
            "{edited}"
        );
        assert!(matches!(edit, Edit::InsertedImports { .. }));
        let before: toml::Table = toml::from_str(original).unwrap();
        for (k, v) in &before {
            assert_eq!(t.get(k), Some(v), "{k} kept: {edited}");
        }
        assert_eq!(revert(&edited, &edit).unwrap(), original);
    }
}

#[test]
fn an_existing_imports_list_gets_one_more_entry() {
    let original = "version = 2\n# keep me\nimports = [\"/etc/containerd/extra.toml\"] # and me\n\n[grpc]\n  address = \"/s\"\n";
    let (edited, edit) = add_import(original, "/etc/containerd/conf.d/*.toml").unwrap();
    assert_eq!(
        edit,
        Edit::AddedImport {
            import: "/etc/containerd/conf.d/*.toml".into()
        }
    );
    let t: toml::Table = toml::from_str(&edited).unwrap();
    let imports: Vec<&str> = t["imports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        imports,
        [
            "/etc/containerd/extra.toml",
            "/etc/containerd/conf.d/*.toml"
        ]
    );
    assert!(
        edited.contains("# keep me") && edited.contains("# and me"),
        "{edited}"
    );
    let back = revert(&edited, &edit).unwrap();
    let t: toml::Table = toml::from_str(&back).unwrap();
    assert_eq!(t["imports"].as_array().unwrap().len(), 1);
    assert!(
        back.contains("# keep me") && back.contains("[grpc]"),
        "{back}"
    );
}

#[test]
fn a_changed_edit_is_not_reverted() {
    let (edited, edit) = append_block(V2_USER, &v2_tables(&Paths::default())).unwrap();
    let changed = edited.replace("rund.io/userns", "rund.io/whatever");
    assert!(matches!(
        revert(&changed, &edit),
        Err(EditError::Changed(_))
    ));
    let (edited, edit) = add_import("version = 3\n", "/c/*.toml").unwrap();
    let changed = edited.replace("/c/*.toml", "/d/*.toml");
    assert!(matches!(
        revert(&changed, &edit),
        Err(EditError::Changed(_))
    ));
}
