# Sourced by single-GPU device scripts: the wheels the device image lacks (.whl/small, carried with the call)
# installed into /tmp/site; SITE is ":/tmp/site" to append to a PYTHONPATH, or empty where none were carried.
SITE=
if [ -d .whl/small ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/small/*.whl \
    > /tmp/pip.log 2>&1 || { tail /tmp/pip.log; exit 1; }
  SITE=:/tmp/site
fi
