# Sourced by the GPU scripts (repo root as the working directory): unpacks the Debian
# packages carried in .gpu/debs into /tmp/deps and points pkg-config, CMake's search, the
# dynamic linker and PATH at them, since the GPU machine has no Debian registry.
DEPS=/tmp/deps
mkdir -p "$DEPS"
for f in .gpu/debs/*.deb; do dpkg -x "$f" "$DEPS"; done
# .pc files name prefix=/usr: point them at the unpacked tree.
for pc in "$DEPS"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$DEPS"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] && sed -i -e 's|=/usr|='"$DEPS"'/usr|g' -e 's|-I/usr/|-I'"$DEPS"'/usr/|g' "$pc"
done
export PKG_CONFIG_PATH="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig"
export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ! command -v pkg-config >/dev/null; then
  ln -sf "$DEPS/usr/bin/pkgconf" "$DEPS/usr/bin/pkg-config"
  export PATH="$DEPS/usr/bin:$PATH"
fi
export PATH="/usr/local/cuda/bin:$PATH"
