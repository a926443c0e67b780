# Makes and enters the project's Python environment, .venv: `. ci/bootstrap.sh` from the
# project's root (sourced, so that the environment stays entered in your shell).
#
# A fresh Debian refuses `pip install` into the system Python (PEP 668) and may lack venv's
# ensurepip (python3-venv); Fedora may lack Python 3.11, which the nox sessions ask for. This
# installs what is missing (as root, or with sudo), creates .venv with Python 3.11, and
# installs nox and the project into it, so that `pip install nox`, `nox -s ...` and
# `python -m builder` all work in this shell. Later shells: `. .venv/bin/activate`.
# POSIX sh: works sourced from bash, zsh and dash. It never exits your shell.

_msb_sudo() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "bootstrap: needs root or sudo to run: $*" >&2
        return 1
    fi
}

_msb_install() {  # PACKAGE...: with the machine's package manager
    echo "bootstrap: installing $* (needed to make the project's environment)"
    if command -v apt-get >/dev/null 2>&1; then
        # A fresh system has no package lists yet: update only when the install needs it.
        _msb_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" 2>/dev/null \
            || { _msb_sudo apt-get update -q \
                 && _msb_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"; }
    elif command -v dnf >/dev/null 2>&1; then
        _msb_sudo dnf install -y "$@"
    else
        echo "bootstrap: install $* yourself (neither apt-get nor dnf is here)" >&2
        return 1
    fi
}

_msb_bootstrap() {
    if [ ! -f noxfile.py ] || [ ! -d builder ]; then
        echo "bootstrap: run it from the project's root: . ci/bootstrap.sh" >&2
        return 1
    fi
    if ! command -v python3.11 >/dev/null 2>&1; then
        _msb_install python3.11 || return 1
    fi
    # Debian splits ensurepip, which venv needs, into python3.11-venv.
    if ! python3.11 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        _msb_install python3.11-venv || return 1
    fi
    if [ ! -x .venv/bin/python3.11 ]; then
        rm -rf .venv
        python3.11 -m venv .venv || return 1
    fi
    # shellcheck disable=SC1091  # made just above
    . .venv/bin/activate || return 1
    # The project compiles one C extension when it is installed (builder/delta/_bsdiff.c:
    # gcc, Python 3.11's headers, libdivsufsort): the host tools come first.
    bash ci/install-host-tools.sh || return 1
    echo "bootstrap: installing nox and the project into .venv"
    python -m pip install --quiet --disable-pip-version-check nox -e . || return 1
    echo "bootstrap: in .venv ($(python --version)): pip, nox and python -m builder work in" \
         "this shell; in a new one: . .venv/bin/activate"
}

_msb_bootstrap
_msb_status=$?
unset -f _msb_sudo _msb_install _msb_bootstrap
[ "$_msb_status" -eq 0 ]
