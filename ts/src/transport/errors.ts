/** Typed errors of the transport. Each names the batch, file or address concerned. */

export class TransportError extends Error {
  override name = "TransportError";
}

/** A spool file is missing, truncated or not in the spool format (see spool-file.ts). */
export class SpoolFormatError extends TransportError {
  override name = "SpoolFormatError";
  constructor(
    readonly path: string,
    detail: string,
  ) {
    super(`spool file ${path}: ${detail}`);
  }
}

/** The sender was closed (or could not drain) while batches were still unacknowledged. */
export class SenderClosedError extends TransportError {
  override name = "SenderClosedError";
}

/** A wait on the transport ran past its deadline. */
export class TransportTimeoutError extends TransportError {
  override name = "TransportTimeoutError";
}

export function isTransportError(error: unknown): error is TransportError {
  return error instanceof TransportError;
}
