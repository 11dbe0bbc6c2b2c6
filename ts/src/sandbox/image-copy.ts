/**
 * Copies an image between two Docker daemons (`docker save | docker -H … load`,
 * streamed, nothing on disk), so a second host gets the base image without
 * bootstrapping Debian again. Task images can build on any host once the base
 * is there (their builds need no network), so only the base is copied.
 */
import { dockerClient, followProgress, withDockerEndpoint, type DockerEndpoint } from "./docker.ts";
import { daemonError } from "./errors.ts";

export async function copyImage(tag: string, from: DockerEndpoint, to: DockerEndpoint): Promise<void> {
  let saved: NodeJS.ReadableStream;
  try {
    saved = await withDockerEndpoint(from, () => dockerClient().getImage(tag).get());
  } catch (e) {
    throw daemonError(e, `save ${tag} on ${from.name}`, { image: tag });
  }
  try {
    const stream: unknown = await to.docker.loadImage(saved as never, { quiet: true } as never);
    await followProgress(to.docker, stream);
  } catch (e) {
    throw daemonError(e, `load ${tag} on ${to.name}`, { image: tag });
  }
}
