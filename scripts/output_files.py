"""output_files.py — the scripts' side of flashgpt's output rule (model/output_files.h): no script
writes over a file that it did not create.

check_output(path, is_own, what) is called for every output path before anything is written:
  - nothing there, or an empty regular file: fine;
  - a symbolic link: written through (the file it names is checked; the link stays);
  - a directory, a device, a pipe or a socket: refused;
  - a non-empty regular file: only when is_own(path) says it is this script's own earlier
    output (`what` names that output for the message); else refused, naming the file.
A refusal exits with one line on stderr and status 1.

png_software(script) is the PNG "Software" text the plots are saved with (savefig's
metadata), which is how a script recognises its own earlier plot: is_own_png(script).
"""
import os
import stat
import sys


def png_software(script):
    return f"flashgpt {script}"


def is_own_png(script):
    marker = b"Software\x00" + png_software(script).encode()

    def own(path):
        with open(path, "rb") as f:
            head = f.read(1 << 16)  # the tEXt chunks matplotlib writes come before the image data
        return head.startswith(b"\x89PNG\r\n\x1a\n") and marker in head

    return own


def starts_with_line(prefix):
    def own(path):
        with open(path, "rb") as f:
            return f.read(len(prefix.encode())) == prefix.encode()

    return own


def check_output(path, is_own, what, prog):
    if os.path.islink(path) and not os.path.exists(path):
        sys.exit(f"{prog}: '{path}' is a symbolic link to a missing file; give a file name")
    try:
        st = os.stat(path)  # a link's target
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        sys.exit(f"{prog}: '{path}' exists and is not a regular file (a directory, device, pipe "
                 f"or socket); give another output directory")
    if st.st_size == 0 or is_own(path):
        return
    sys.exit(f"{prog}: '{path}' exists and is not {what}; a script writes over a file only "
             f"when it is its own earlier output: pick another --out, or delete that file "
             f"yourself if nothing needs it")
