//! Whom the traced command runs as: a user of the password database, or the one who ran sudo.

use std::ffi::CString;

use crate::{Credentials, Error};

impl Credentials {
    /// The user `user` names, by name or else by uid, from the system's user database (NSS:
    /// /etc/passwd and whatever else it is configured with). A uid without an entry runs with
    /// the group of the same number.
    pub fn of_user(user: &str) -> Result<Credentials, Error> {
        let unknown = || Error::NoSuchUser(user.to_owned());
        let by_name = CString::new(user).map_err(|_| unknown()).and_then(|name| {
            // SAFETY: `name` is a C string; getpwnam_r gets a valid out-struct and buffer.
            lookup(|entry, buf, len, found| unsafe {
                libc::getpwnam_r(name.as_ptr(), entry, buf, len, found)
            })
            .map_err(|source| Error::UserDatabase {
                user: user.to_owned(),
                source,
            })
        })?;
        if let Some(credentials) = by_name {
            return Ok(credentials.announced(user));
        }
        let Ok(uid) = user.parse::<u32>() else {
            return Err(unknown());
        };
        // SAFETY: as above, by uid.
        let by_uid = lookup(|entry, buf, len, found| unsafe {
            libc::getpwuid_r(uid, entry, buf, len, found)
        })
        .map_err(|source| Error::UserDatabase {
            user: user.to_owned(),
            source,
        })?;
        Ok(by_uid
            .unwrap_or(Credentials { uid, gid: uid })
            .announced(user))
    }

    /// The user who ran fltrace through sudo (`SUDO_UID` and `SUDO_GID`).
    pub fn of_sudo_user() -> Result<Credentials, Error> {
        let var = |name: &'static str| -> Result<u32, Error> {
            let value = std::env::var(name).map_err(|_| Error::NoSudoUser {
                variable: name,
                problem: "(run fltrace with sudo)",
            })?;
            value.parse().map_err(|_| Error::NoSudoUser {
                variable: name,
                problem: "to be a number",
            })
        };
        Ok(Credentials {
            uid: var("SUDO_UID")?,
            gid: var("SUDO_GID")?,
        }
        .announced("the user who ran sudo"))
    }

    /// Said with -v: whom the command will run as.
    fn announced(self, who: &str) -> Credentials {
        log::info!(
            "the command runs as {who}: uid {}, gid {}",
            self.uid,
            self.gid
        );
        self
    }
}

/// Runs a `getpw*_r` call with a buffer that grows while the entry does not fit.
fn lookup(
    mut call: impl FnMut(
        *mut libc::passwd,
        *mut libc::c_char,
        libc::size_t,
        *mut *mut libc::passwd,
    ) -> libc::c_int,
) -> std::io::Result<Option<Credentials>> {
    let mut size = 1024;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: passwd is plain data for libc to fill.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut entry, buf.as_mut_ptr(), buf.len(), &mut found);
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => {
                return Ok(Some(Credentials {
                    uid: entry.pw_uid,
                    gid: entry.pw_gid,
                }));
            }
            libc::ERANGE if size < 1 << 20 => size *= 4,
            // "Not found" as some C libraries report it.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            rc => return Err(std::io::Error::from_raw_os_error(rc)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// root is uid 0 by name and by number; an unknown name is an error, an unknown uid runs
    /// with the group of its number.
    #[test]
    fn users_are_found_by_name_and_uid() {
        let root = Credentials::of_user("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let by_uid = Credentials::of_user("0").unwrap();
        assert_eq!((by_uid.uid, by_uid.gid), (0, 0));
        let unnamed = Credentials::of_user("4000001").unwrap();
        assert_eq!((unnamed.uid, unnamed.gid), (4000001, 4000001));
        assert_eq!(
            Credentials::of_user("no-such-user-here")
                .unwrap_err()
                .to_string(),
            "no such user: no-such-user-here"
        );
        assert!(Credentials::of_user("nul\0byte").is_err());
    }
}
