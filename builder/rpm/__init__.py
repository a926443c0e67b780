"""RPM stage: release -> RPMs and their yum repository.

Takes: release.yaml, specs/*.spec.j2 and specs/sources/. Produces: DIR/rpms/, DIR/repo/ and
DIR/specs/ (packages, rpmbuild), the SAMPLE base OS stand-ins DIR/sample-base/ (sample_base),
the payloads fetched and verified (payloads), and signatures over RPMs and repomd.xml (signing).

Imports: builder.core, builder.release, builder.context.
"""
