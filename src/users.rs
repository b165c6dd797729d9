//! Names of users and groups, from the system's databases (glibc's `files` backend is built
//! into the static binary; nothing is loaded). Used only to word messages and checks.

use std::ffi::CString;

/// The name of `uid`, or its number when it has none.
pub fn user_name(uid: u32) -> String {
    user_and_groups(uid).0
}

/// `"name (uid N)"`, how messages name an owner.
pub fn describe(uid: u32) -> String {
    format!("{} (uid {uid})", user_name(uid))
}

/// This user's name and the names of its groups, from the user and group databases
/// (glibc's `files` backend is built into the static binary). A uid without a name is shown
/// as its number.
pub fn user_and_groups(uid: u32) -> (String, Vec<String>) {
    let fallback = (uid.to_string(), Vec::new());
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the result points into `pwd` and `buf`.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return fallback;
    }
    // SAFETY: getpwuid_r succeeded, so pw_name is a NUL-terminated string in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    let user = name.to_string_lossy().into_owned();
    let mut gids = vec![0 as libc::gid_t; 256];
    let mut n = gids.len() as libc::c_int;
    // SAFETY: `gids` holds `n` entries; getgrouplist writes at most that many.
    let rc = unsafe { libc::getgrouplist(name.as_ptr(), pwd.pw_gid, gids.as_mut_ptr(), &mut n) };
    let groups = if rc < 0 {
        Vec::new()
    } else {
        gids[..n as usize]
            .iter()
            .filter_map(|gid| group_name(*gid))
            .collect()
    };
    (user, groups)
}

fn group_name(gid: libc::gid_t) -> Option<String> {
    with_group(|grp, buf, found| unsafe {
        // SAFETY: as in `with_group`.
        libc::getgrgid_r(gid, grp, buf.as_mut_ptr(), buf.len(), found)
    })
    .map(|(name, _)| name)
}

/// The number of members the group `name` lists, `None` when there is no such group.
pub fn group_members(name: &str) -> Option<usize> {
    let cname = CString::new(name).ok()?;
    with_group(|grp, buf, found| unsafe {
        // SAFETY: as in `with_group`.
        libc::getgrnam_r(cname.as_ptr(), grp, buf.as_mut_ptr(), buf.len(), found)
    })
    .map(|(_, members)| members)
}

/// Calls a `getgr*_r` function with valid buffers; returns the group's name and member count.
fn with_group(
    call: impl FnOnce(&mut libc::group, &mut Vec<libc::c_char>, &mut *mut libc::group) -> libc::c_int,
) -> Option<(String, usize)> {
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    if call(&mut grp, &mut buf, &mut found) != 0 || found.is_null() {
        return None;
    }
    // SAFETY: the call succeeded: gr_name is a NUL-terminated string and gr_mem a
    // NULL-terminated array of them, all inside `buf`.
    unsafe {
        let name = std::ffi::CStr::from_ptr(grp.gr_name)
            .to_string_lossy()
            .into_owned();
        let mut members = 0;
        while !(*grp.gr_mem.add(members)).is_null() {
            members += 1;
        }
        Some((name, members))
    }
}
