"""The SAMPLE bootable base OS: Debian 12 packages made into an ostree base commit.

RHEL for Edge base commits cannot be fetched here, so a base that really boots (a kernel,
systemd, ostree's boot integration, GRUB's environment tools, Python for the image's own
programs, upstream greenboot as released) is built from Debian packages with mmdebstrap,
laid out as an edge commit (kernel and initramfs under /usr/lib/modules/KVER/, /etc as
/usr/etc, empty /var) and committed into DIR/baseos/repo. A release names it as any base commit:
`ostree: {base: {repo: DIR/baseos/repo, ref: sample/debian12/{arch}/base}}`.
"""
