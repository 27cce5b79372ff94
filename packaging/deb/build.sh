#!/bin/sh
# build.sh - make deb: build/mtad_<version>_<arch>.deb with dpkg-deb.
#
# The tree is what `make install PREFIX=/usr` installs (binaries, man pages,
# the unit, sysusers.d, tmpfiles.d, /etc/logrotate.d/mtad and
# /etc/mtad/relay.yaml.example), plus /etc/mtad/relay.yaml (a copy of the
# example) and the maintainer scripts here; every file in /etc is a
# conffile.  Depends: is computed by dpkg-shlibdeps from the binaries'
# libraries.
# Maintainer: MTAD_DEB_MAINTAINER, else DEBFULLNAME <DEBEMAIL> (as dch and
# dh_make take it), else git's user.name <user.email>, else the author of
# the commit packaged.  Homepage:
# MTAD_DEB_HOMEPAGE, else the git remote origin as an https URL, else none.
# Usage: sh packaging/deb/build.sh BUILD_DIR
set -eu
BUILD=${1:-build}
TOP=$(pwd)
VERSION=${MTAD_DEB_VERSION:-$(cat VERSION)+git$(git log -1 --format=%cd --date=format:%Y%m%d%H%M 2>/dev/null || echo 0)}
ARCH=$(dpkg --print-architecture)
OUT=$TOP/$BUILD/mtad_${VERSION}_${ARCH}.deb
# Staged outside $BUILD: the Makefile reads every *.d under $BUILD as a
# dependency file, and the tree has tmpfiles.d/ and sysusers.d/.
WORK=$(mktemp -d /tmp/mtad-deb.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
STAGE=$WORK/mtad
mkdir -p "$STAGE/DEBIAN"
rm -f "$TOP/$BUILD"/mtad_*.deb
make -s install BUILD="$BUILD" PREFIX=/usr DESTDIR="$STAGE" >/dev/null
# the package's configuration starts as the example, which stays beside
# it (relay.yaml(5) points to it)
cp "$STAGE/etc/mtad/relay.yaml.example" "$STAGE/etc/mtad/relay.yaml"
strip --strip-unneeded "$STAGE/usr/sbin/mtad" "$STAGE/usr/sbin/mtactl" \
    "$STAGE/usr/sbin/mtad-sendmail"
gzip -9n "$STAGE"/usr/share/man/man5/*.5 "$STAGE"/usr/share/man/man8/*.8
install -d "$STAGE/usr/share/doc/mtad"
install -m 0644 packaging/deb/copyright "$STAGE/usr/share/doc/mtad/copyright"
install -m 0644 README.md "$STAGE/usr/share/doc/mtad/README.md"
install -m 0644 packaging/deb/conffiles "$STAGE/DEBIAN/conffiles"
for f in postinst prerm postrm; do
    install -m 0755 "packaging/deb/$f" "$STAGE/DEBIAN/$f"
done

# dpkg-shlibdeps wants a debian/control beside it: a throwaway one.
SHL=$WORK/shlibdeps
mkdir -p "$SHL/debian"
printf 'Source: mtad\n\nPackage: mtad\nArchitecture: any\n' > "$SHL/debian/control"
DEPENDS=$(cd "$SHL" && dpkg-shlibdeps -O "$STAGE/usr/sbin/mtad" \
    "$STAGE/usr/sbin/mtactl" "$STAGE/usr/sbin/mtad-sendmail" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$DEPENDS" ] || { echo "deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
DEPENDS="$DEPENDS, adduser | systemd"
MAINTAINER=${MTAD_DEB_MAINTAINER:-}
if [ -z "$MAINTAINER" ] && [ -n "${DEBFULLNAME:-}" ] && [ -n "${DEBEMAIL:-}" ]; then
    MAINTAINER="$DEBFULLNAME <$DEBEMAIL>"
fi
if [ -z "$MAINTAINER" ] && git config user.email >/dev/null 2>&1; then
    MAINTAINER="$(git config user.name) <$(git config user.email)>"
fi
[ -n "$MAINTAINER" ] || MAINTAINER=$(git log -1 --format='%an <%ae>' 2>/dev/null || true)
case $MAINTAINER in
?*" <"?*@?*">") ;;
*)  echo "deb: no Maintainer (\"Name <address>\"): set MTAD_DEB_MAINTAINER," \
        "or DEBFULLNAME and DEBEMAIL" >&2
    exit 1 ;;
esac
HOMEPAGE=${MTAD_DEB_HOMEPAGE:-$(git remote get-url origin 2>/dev/null |
    sed -n 's#^git@\([^:]*\):#https://\1/#; s#\.git$##; /^https:\/\//p')}
[ -n "$HOMEPAGE" ] ||
    echo "deb: no Homepage field (no MTAD_DEB_HOMEPAGE, no git remote origin)" >&2
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
# for sed's replacement: \, & and the # delimiter taken literally
lit() { printf '%s' "$1" | sed 's/[\\&#]/\\&/g'; }
MAINTAINER=$(lit "$MAINTAINER") HOMEPAGE=$(lit "$HOMEPAGE")
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@SIZE@|$SIZE|" \
    -e "s#@DEPENDS@#$DEPENDS#" -e "s#@MAINTAINER@#$MAINTAINER#" \
    -e "s#@HOMEPAGE@#$HOMEPAGE#" -e '/^Homepage: *$/d' \
    packaging/deb/control.in > "$STAGE/DEBIAN/control"
(cd "$STAGE" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' |
    LC_ALL=C sort | xargs md5sum) > "$STAGE/DEBIAN/md5sums"
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$OUT" >/dev/null
echo "deb: $OUT"
