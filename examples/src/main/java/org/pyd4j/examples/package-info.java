/** Example DL4J jobs that pyd4j profiles, tunes and feeds; they run on java/target/lib's classpath. */
package org.pyd4j.examples;
