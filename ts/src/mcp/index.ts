export { runServer, type RunView } from "./server.ts";
