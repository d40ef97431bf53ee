"""The image relay: OCI image layouts to hosts' image stores, only missing blobs sent (source ``oci-relay``)."""
