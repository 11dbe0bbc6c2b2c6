/** Vite bundles CSS imports into the page; TypeScript needs to know they exist. */
declare module "*.css";
